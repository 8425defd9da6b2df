//! moto's server (Apache-2.0, `pip install 'moto[server]'`) on 127.0.0.1
//! as STS and S3 at once, for the tests of role profiles. Started with
//! `python3 -m moto.server`, on a free port; stopped by PID when dropped.
//!
//! With `enforce_auth`, moto checks every request's SigV4 signature and
//! IAM policies once the setup is done (`INITIAL_NO_AUTH_ACTION_COUNT`):
//! the setup script makes a bucket, a user whose policy allows only
//! `sts:AssumeRole`, and a role that may do anything. So an upload that
//! works was signed with keys STS gave for the role, and the STS call was
//! signed right with the user's keys. moto (5.2) cannot check unsigned
//! requests (AssumeRoleWithWebIdentity) in that mode: those tests use it
//! without.
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use tempfile::TempDir;

use super::{start_listening, tempdir};

/// Objects the setup script puts (empty) in `bkt`: moto 5.2, when it
/// checks signatures, rebuilds the canonical query from the decoded URL
/// (`prefix=k/` where the client signed `prefix=k%2F`, as SigV4 wants), so
/// the listing ferry makes to tell a missing key from a "directory" is
/// refused. Over an existing object, `cp` sends no such listing.
pub const PLACEHOLDERS: [&str; 7] = [
    "role",
    "chained",
    "container",
    "web",
    "direct",
    "imds",
    "imdsrole",
];

/// The actions the setup script makes before moto starts checking: 8,
/// then one per placeholder.
const SETUP_ACTIONS: usize = 8 + PLACEHOLDERS.len();

const SETUP: &str = r#"
import json, sys
import boto3
ep = sys.argv[1]
kw = dict(endpoint_url=ep, region_name="us-east-1",
          aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **kw)
s3 = boto3.client("s3", **kw)
s3.create_bucket(Bucket="bkt")
iam.create_user(UserName="ferry")
key = iam.create_access_key(UserName="ferry")["AccessKey"]
def policy(name, action):
    doc = {"Version": "2012-10-17",
           "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}]}
    return iam.create_policy(PolicyName=name, PolicyDocument=json.dumps(doc))["Policy"]["Arn"]
iam.attach_user_policy(UserName="ferry", PolicyArn=policy("assume", "sts:AssumeRole"))
trust = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
role = iam.create_role(RoleName="ferry-role",
                       AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
iam.attach_role_policy(RoleName="ferry-role", PolicyArn=policy("all", "*"))
for k in sys.argv[2].split(","):
    s3.put_object(Bucket="bkt", Key=k, Body=b"")
print(json.dumps({"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"],
                  "role_arn": role}))
"#;

pub struct Moto {
    dir: TempDir,
    child: Option<Child>,
    pub port: u16,
    /// The user's keys (may only assume the role) and the role.
    pub access_key: String,
    pub secret_key: String,
    pub role_arn: String,
}

/// python3 can import moto's server and boto3.
fn moto_usable() -> bool {
    Command::new("python3")
        .args(["-c", "import moto.server, boto3"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// moto with the bucket `bkt`, the user and the role, or `None` (and a
/// message) when moto is not installed.
pub fn moto_or_skip(test: &str, enforce_auth: bool) -> Option<Moto> {
    if !moto_usable() {
        eprintln!("SKIPPED {test}: python3 with moto[server] and boto3 not found (pip install 'moto[server]')");
        return None;
    }
    Some(Moto::start(enforce_auth))
}

impl Moto {
    pub fn start(enforce_auth: bool) -> Moto {
        let dir = tempdir();
        let (child, port) = start_listening("moto", &dir.path().join("moto.log"), |port| {
            let mut c = Command::new("python3");
            c.args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
                .arg(port.to_string());
            if enforce_auth {
                c.env("INITIAL_NO_AUTH_ACTION_COUNT", SETUP_ACTIONS.to_string());
            }
            c
        });
        let mut m = Moto {
            dir,
            child: Some(child),
            port,
            access_key: String::new(),
            secret_key: String::new(),
            role_arn: String::new(),
        };
        let out = Command::new("python3")
            .args(["-c", SETUP, &m.endpoint(), &PLACEHOLDERS.join(",")])
            .output()
            .unwrap_or_else(|e| panic!("moto setup: {e}"));
        assert!(
            out.status.success(),
            "moto setup failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            m.log()
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let v =
            super::parse_json(text.trim()).unwrap_or_else(|e| panic!("setup output {text}: {e}"));
        let field = |k: &str| {
            v.get(k)
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string()
        };
        m.access_key = field("access_key");
        m.secret_key = field("secret_key");
        m.role_arn = field("role_arn");
        m
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Keys STS gives for the role now (for a test that serves them
    /// itself), as (access key, secret, session token).
    pub fn assumed_role_keys(&self) -> (String, String, String) {
        let script = r#"
import json, sys, boto3
sts = boto3.client("sts", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
c = sts.assume_role(RoleArn=sys.argv[4], RoleSessionName="harness")["Credentials"]
print(json.dumps({"a": c["AccessKeyId"], "s": c["SecretAccessKey"], "t": c["SessionToken"]}))
"#;
        let out = Command::new("python3")
            .args([
                "-c",
                script,
                &self.endpoint(),
                &self.access_key,
                &self.secret_key,
                &self.role_arn,
            ])
            .output()
            .unwrap_or_else(|e| panic!("assume role: {e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = super::parse_json(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        let f = |k: &str| {
            v.get(k)
                .and_then(|x| x.as_str())
                .unwrap_or_default()
                .to_string()
        };
        (f("a"), f("s"), f("t"))
    }

    /// Requests moto served (its access log).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default()
    }

    /// The number of STS calls seen: POSTs to `/` (S3 requests name a
    /// bucket in the path).
    pub fn sts_calls(&self) -> usize {
        self.log().matches("\"POST / HTTP/1.1\" 200").count()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
