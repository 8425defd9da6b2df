//! amazon-ec2-metadata-mock (AEMM, Apache-2.0, `go install
//! github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v1.13.0`,
//! installed by scripts/install-peers.sh) on 127.0.0.1: EC2 instance
//! metadata serving the keys a test chooses as the instance profile's
//! role `ferry-role`, IMDSv2 only (a GET without the session token is
//! refused with 401), so a ferry run that signs with those keys fetched
//! them the IMDSv2 way. Reached through `AWS_EC2_METADATA_SERVICE_ENDPOINT`;
//! stopped by PID when dropped.
use std::path::PathBuf;
use std::process::{Child, Command};

use tempfile::TempDir;

use super::{installed, start_listening, tempdir};

/// The instance profile's role name it serves.
pub const ROLE: &str = "ferry-role";

pub struct Ec2MetadataMock {
    dir: TempDir,
    child: Option<Child>,
    pub port: u16,
}

/// ec2-metadata-mock on PATH, in /usr/local/bin, or where Go puts it.
pub fn ec2_metadata_mock_bin() -> Option<PathBuf> {
    installed("ec2-metadata-mock", "ec2-metadata-mock", |_| true)
}

/// AEMM serving `(access key, secret, session token)` for [`ROLE`], or
/// `None` (and a message) when it is not installed.
pub fn ec2_metadata_mock_or_skip(test: &str, keys: (&str, &str, &str)) -> Option<Ec2MetadataMock> {
    let Some(bin) = ec2_metadata_mock_bin() else {
        eprintln!(
            "SKIPPED {test}: ec2-metadata-mock not found (scripts/install-peers.sh installs it with go install)"
        );
        return None;
    };
    Some(Ec2MetadataMock::start(&bin, keys))
}

impl Ec2MetadataMock {
    pub fn start(bin: &std::path::Path, (access, secret, token): (&str, &str, &str)) -> Self {
        let dir = tempdir();
        // Only the values that change; AEMM keeps its defaults for the rest.
        let config = format!(
            r#"{{"metadata":{{"values":{{"iam-security-credentials-role":"{ROLE}","iam-security-credentials":{{"Code":"Success","LastUpdated":"2026-01-01T00:00:00Z","Type":"AWS-HMAC","AccessKeyId":"{access}","SecretAccessKey":"{secret}","Token":"{token}","Expiration":"2999-01-01T00:00:00Z"}}}}}}}}"#
        );
        let cfg = dir.path().join("aemm.json");
        std::fs::write(&cfg, config).unwrap_or_else(|e| panic!("aemm config: {e}"));
        let (child, port) =
            start_listening("ec2-metadata-mock", &dir.path().join("aemm.log"), |port| {
                let mut c = Command::new(bin);
                c.args(["-n", "127.0.0.1", "-I", "-p"])
                    .arg(port.to_string())
                    .arg("-c")
                    .arg(&cfg)
                    // AEMM looks for a saved configuration in HOME.
                    .env("HOME", dir.path());
                c
            });
        Ec2MetadataMock {
            dir,
            child: Some(child),
            port,
        }
    }

    /// For `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What AEMM logged (its requests are not logged; its start is).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("aemm.log")).unwrap_or_default()
    }
}

impl Drop for Ec2MetadataMock {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
