//! The checks an OpenSSH host certificate must pass once its CA is known to
//! be trusted for the host (`known_hosts::check_cert_authority`): what
//! `ssh`'s `check_host_cert` does (sshconnect.c), with the time passed in so
//! this is a pure function.
//!
//! One deliberate difference: OpenSSH accepts a host certificate with an
//! empty principal list for any host; ferry refuses it, since a certificate
//! that names no host vouches for none in particular.
use russh::keys::ssh_key::certificate::CertType;
use russh::keys::{Algorithm, Certificate};

/// `Ok` when `cert` is a host certificate signed by the key it names as
/// its CA, listing `principal`, valid at `now` (Unix seconds), and without
/// critical options; otherwise why not, as a phrase that reads after
/// "the host certificate ...".
pub(crate) fn validate(cert: &Certificate, principal: &str, now: u64) -> Result<(), String> {
    if cert.cert_type() != CertType::Host {
        return Err("it is a user certificate, not a host certificate".into());
    }
    // OpenSSH's default CASignatureAlgorithms leave out ssh-rsa (SHA-1).
    if let Algorithm::Rsa { hash: None } = cert.signature().algorithm() {
        return Err("its CA signed it with ssh-rsa (SHA-1), which is not accepted".into());
    }
    // Only that the key named as CA signed it: whether that key is a CA we
    // trust for this host is the caller's known_hosts lookup.
    if cert.verify_signature().is_err() {
        return Err("its CA signature does not verify".into());
    }
    let principals = cert.valid_principals();
    if principals.is_empty() {
        return Err(format!(
            "it lists no principals (ferry requires {principal:?} among them)"
        ));
    }
    // An exact comparison, as sshd's principal check for host certificates.
    if !principals.iter().any(|p| p == principal) {
        return Err(format!(
            "it is for {}, not for {principal:?}",
            principals
                .iter()
                .map(|p| format!("{p:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if now < cert.valid_after() {
        return Err(format!(
            "it is not valid before {}",
            utc(cert.valid_after())
        ));
    }
    if now >= cert.valid_before() {
        return Err(format!("it expired on {}", utc(cert.valid_before())));
    }
    if !cert.critical_options().is_empty() {
        let names: Vec<&str> = cert.critical_options().keys().map(|k| k.as_str()).collect();
        return Err(format!(
            "it has critical options ferry does not understand: {}",
            names.join(", ")
        ));
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS UTC` for Unix seconds (the civil-from-days
/// algorithm; `forever` for OpenSSH's "no expiry" value).
pub(crate) fn utc(secs: u64) -> String {
    if secs == u64::MAX {
        return "forever".into();
    }
    let (y, m, d, h, mi, sec) = ferry_sftp::civil(i64::try_from(secs).unwrap_or(i64::MAX));
    format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{sec:02} UTC")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;
    use russh::keys::ssh_key::certificate::Builder;
    use russh::keys::ssh_key::private::Ed25519Keypair;
    use russh::keys::PrivateKey;

    fn key(seed: u8) -> PrivateKey {
        PrivateKey::from(Ed25519Keypair::from_seed(&[seed; 32]))
    }

    /// A certificate for `key(1)` signed by `key(2)`.
    fn cert(
        kind: CertType,
        principals: &[&str],
        after: u64,
        before: u64,
        critical: bool,
    ) -> Certificate {
        let mut b = Builder::new(
            [7u8; 16],
            key(1).public_key().key_data().clone(),
            after,
            before,
        )
        .unwrap();
        b.cert_type(kind).unwrap();
        b.key_id("test").unwrap();
        for p in principals {
            b.valid_principal(*p).unwrap();
        }
        if principals.is_empty() {
            // "Valid for any principal": an empty list on the wire.
            b.all_principals_valid().unwrap();
        }
        if critical {
            b.critical_option("force-command", "true").unwrap();
        }
        b.sign(&key(2)).unwrap()
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn a_valid_host_certificate_passes() {
        let c = cert(
            CertType::Host,
            &["web", "127.0.0.1"],
            NOW - 10,
            NOW + 10,
            false,
        );
        assert_eq!(validate(&c, "127.0.0.1", NOW), Ok(()));
    }

    #[test]
    fn each_failed_check_says_what_failed() {
        let host = |p: &[&str], a, b| cert(CertType::Host, p, a, b, false);
        let cases = [
            (
                cert(CertType::User, &["web"], 0, u64::MAX, false),
                "user certificate",
            ),
            (host(&["web"], 0, u64::MAX), "not for \"db\""),
            (host(&[], 0, u64::MAX), "no principals"),
            (host(&["db"], NOW + 1, u64::MAX), "not valid before"),
            (host(&["db"], 0, NOW), "expired on"),
            (
                cert(CertType::Host, &["db"], 0, u64::MAX, true),
                "force-command",
            ),
        ];
        for (c, want) in cases {
            let e = validate(&c, "db", NOW).unwrap_err();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
        // Principals compare exactly: no patterns, no case folding.
        let c = host(&["*.example.com", "DB"], 0, u64::MAX);
        assert!(validate(&c, "db", NOW).is_err());
        assert!(validate(&c, "x.example.com", NOW).is_err());
    }

    #[test]
    fn a_tampered_certificate_fails_its_signature() {
        let good = cert(CertType::Host, &["db"], 0, u64::MAX, false);
        // Re-encode with another principal list but the old signature.
        let mut bytes = good.to_bytes().unwrap();
        let at = bytes.windows(2).position(|w| w == b"db").unwrap();
        bytes[at] = b'x';
        let bad = Certificate::from_bytes(&bytes).unwrap();
        assert_eq!(bad.valid_principals(), ["xb"]);
        let e = validate(&bad, "xb", NOW).unwrap_err();
        assert!(e.contains("signature"), "{e}");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_800_000_000), "2027-01-15 08:00:00 UTC");
        assert_eq!(utc(u64::MAX), "forever");
    }
}
