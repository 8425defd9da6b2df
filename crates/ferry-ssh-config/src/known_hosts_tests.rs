//! Tests for `known_hosts`: lookups against files written into a temporary
//! directory, with keys and a hashed file produced once by `ssh-keygen` and
//! pasted here so the tests do not need it at run time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::path::PathBuf;

/// `ssh-keygen -t ed25519 -C fixture`; `ssh-keygen -lf` printed the fingerprint.
const ED: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIFNJVB3GyIJrKuKgk1PGcwbiMUngoHdp76pJLpUNYu+V";
const ED_FP: &str = "SHA256:l2InKwZfAaXm6+a4ofU0YBHXN3hGl4qcV4jJkzpPT08";
/// A second ed25519 key: same type, different key.
const ED2: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIGKHSXc3J7az8SR1Yu1FUOU0xNZfT5TQxpuLpg0Tg0Os";
const EC: &str = "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBYNQSXFa8TlAgBOHST2w01NKUV8P4zaBLXYIG9TYSriUtNkjgylbbe7f546ywHW1hDumeAgQ2G9tmOl009Oe/4=";
const EC_FP: &str = "SHA256:OVA6SxbZuyGV/3S7xjL+1X3APrzMbdUPYBbUJD+8Kas";
const RSA: &str = "AAAAB3NzaC1yc2EAAAADAQABAAAAgQC1UagLBl6cJATDKSpRySYEiKxemEIfJXiqduB0bl8B50XsVNAQYgmwWSitMG6c00i13ZpFJniei3rfDYsrEfSZp4H6rPcC7nrIOngoSZsdpSAr/nNKfbEKZIk9CI3we93MgkxPFSJLRSiN1AJ7j4J3K6YiuQVoqfY6O95BSZpPAw==";
const RSA_FP: &str = "SHA256:lZ28YNH3lrkLMgUTqLPdsWOVkH0l3Re/1VB4+WgkNfI";

/// `ssh-keygen -H` of "example.com ED" and "[example.com]:2222 ED".
const HASHED: &str = "\
|1|z7ugzUiPneYkxUczfkZ3Ir6JpIU=|4bt3RFEu1kWyRBV3g/XGan6CUug= ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFNJVB3GyIJrKuKgk1PGcwbiMUngoHdp76pJLpUNYu+V
|1|wOOTB+H3L2KAa+7vxQ1Fe/6/0lI=|omukxzhmJpB8pGzfv9oRrxhgZ/E= ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFNJVB3GyIJrKuKgk1PGcwbiMUngoHdp76pJLpUNYu+V
";

fn blob(b64: &str) -> Vec<u8> {
    STANDARD.decode(b64).unwrap()
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        fs::write(&path, text).unwrap();
        path
    }
}

fn check_one(path: &Path, host: &str, port: u16, alg: &str, key: &str) -> HostKeyStatus {
    check(&[path.to_path_buf()], host, port, alg, &blob(key)).unwrap()
}

#[test]
fn fingerprints_match_ssh_keygen() {
    assert_eq!(fingerprint_sha256(&blob(ED)), ED_FP);
    assert_eq!(fingerprint_sha256(&blob(EC)), EC_FP);
    assert_eq!(fingerprint_sha256(&blob(RSA)), RSA_FP);
}

#[test]
fn plain_entries_match_mismatch_other_types_not_found() {
    let f = Files::new();
    let kh = f.write(
        "known_hosts",
        &format!(
            "# a comment\n\
             \n\
             example.com,192.0.2.1 ssh-ed25519 {ED} user@laptop trailing words\n\
             ec-only.example ecdsa-sha2-nistp256 {EC}\n"
        ),
    );
    let line3 = HostKeyStatus::Match {
        path: kh.clone(),
        line: 3,
    };
    assert_eq!(check_one(&kh, "example.com", 22, "ssh-ed25519", ED), line3);
    assert_eq!(check_one(&kh, "192.0.2.1", 22, "ssh-ed25519", ED), line3);
    // Host names compare case-insensitively, as ssh lower-cases them.
    assert_eq!(check_one(&kh, "Example.COM", 22, "ssh-ed25519", ED), line3);
    assert_eq!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED2),
        HostKeyStatus::Mismatch {
            path: kh.clone(),
            line: 3,
            known_algorithm: "ssh-ed25519".into()
        }
    );
    assert_eq!(
        check_one(&kh, "example.com", 22, "ecdsa-sha2-nistp256", EC),
        HostKeyStatus::OtherTypesKnown {
            algorithms: vec!["ssh-ed25519".into()]
        }
    );
    assert_eq!(
        check_one(&kh, "ec-only.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::OtherTypesKnown {
            algorithms: vec!["ecdsa-sha2-nistp256".into()]
        }
    );
    assert_eq!(
        check_one(&kh, "elsewhere.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
}

#[test]
fn ports_use_bracket_form_only() {
    let f = Files::new();
    let kh = f.write(
        "kh",
        &format!(
            "plain.example ssh-ed25519 {ED}\n\
             [ported.example]:2222 ssh-ed25519 {ED}\n\
             [plain.example]:22 ssh-ed25519 {ED2}\n\
             [any-port.example]:* ssh-ed25519 {ED}\n"
        ),
    );
    assert!(matches!(
        check_one(&kh, "plain.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 1, .. }
    ));
    // A bare entry is for port 22 only.
    assert_eq!(
        check_one(&kh, "plain.example", 2222, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
    assert!(matches!(
        check_one(&kh, "ported.example", 2222, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 2, .. }
    ));
    assert_eq!(
        check_one(&kh, "ported.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
    assert_eq!(
        check_one(&kh, "ported.example", 2200, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
    assert!(matches!(
        check_one(&kh, "any-port.example", 8022, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 4, .. }
    ));
}

#[test]
fn wildcards_and_negation() {
    let f = Files::new();
    let kh = f.write(
        "kh",
        &format!(
            "*.example.com,!evil.example.com ssh-ed25519 {ED}\n\
             b?x.example.org ssh-ed25519 {ED}\n"
        ),
    );
    assert!(matches!(
        check_one(&kh, "www.example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 1, .. }
    ));
    assert_eq!(
        check_one(&kh, "evil.example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
    assert_eq!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
    assert!(matches!(
        check_one(&kh, "box.example.org", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 2, .. }
    ));
    assert_eq!(
        check_one(&kh, "boxx.example.org", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
}

#[test]
fn hashed_entries_from_ssh_keygen() {
    let f = Files::new();
    let kh = f.write("kh", HASHED);
    assert!(matches!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 1, .. }
    ));
    assert!(matches!(
        check_one(&kh, "example.com", 2222, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 2, .. }
    ));
    assert!(matches!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED2),
        HostKeyStatus::Mismatch { line: 1, .. }
    ));
    assert_eq!(
        check_one(&kh, "example.org", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
}

#[test]
fn revoked_wins_everywhere() {
    let f = Files::new();
    let good = f.write("good", &format!("example.com ssh-ed25519 {ED}\n"));
    let revoked = f.write(
        "revoked",
        &format!("# revoked for some other host\n@revoked other.example ssh-ed25519 {ED}\n"),
    );
    assert_eq!(
        check(
            &[good.clone(), revoked.clone()],
            "example.com",
            22,
            "ssh-ed25519",
            &blob(ED)
        )
        .unwrap(),
        HostKeyStatus::Revoked {
            path: revoked.clone(),
            line: 2
        }
    );
    // A revoked line for a different key changes nothing.
    assert!(matches!(
        check(
            &[good, revoked],
            "example.com",
            22,
            "ssh-ed25519",
            &blob(ED2)
        )
        .unwrap(),
        HostKeyStatus::Mismatch { line: 1, .. }
    ));
}

#[test]
fn cert_authority_lines_are_not_host_keys() {
    let f = Files::new();
    let kh = f.write(
        "kh",
        &format!("@cert-authority *.example.com ssh-ed25519 {ED}\n"),
    );
    assert_eq!(
        check_one(&kh, "www.example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
    assert_eq!(
        check_one(&kh, "www.example.com", 22, "ssh-ed25519", ED2),
        HostKeyStatus::NotFound
    );
}

#[test]
fn rsa_signature_algorithms_compare_as_ssh_rsa() {
    let f = Files::new();
    let kh = f.write("kh", &format!("rsa.example ssh-rsa {RSA}\n"));
    for alg in ["ssh-rsa", "rsa-sha2-256", "rsa-sha2-512"] {
        assert!(
            matches!(
                check_one(&kh, "rsa.example", 22, alg, RSA),
                HostKeyStatus::Match { line: 1, .. }
            ),
            "{alg}"
        );
    }
    assert_eq!(
        check_one(&kh, "rsa.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::OtherTypesKnown {
            algorithms: vec!["ssh-rsa".into()]
        }
    );
}

#[test]
fn malformed_lines_are_skipped() {
    let f = Files::new();
    let mut text = Vec::new();
    text.extend_from_slice(b"garbage\n");
    text.extend_from_slice(b"example.com ssh-ed25519\n");
    text.extend_from_slice(b"example.com ssh-ed25519 !!!not-base64!!!\n");
    // Type field disagrees with the blob: corrupt, skipped.
    text.extend_from_slice(format!("example.com ssh-rsa {ED}\n").as_bytes());
    text.extend_from_slice(format!("@unknown-marker example.com ssh-ed25519 {ED2}\n").as_bytes());
    text.extend_from_slice(b"|1|bad|hash ssh-ed25519 AAAA\n");
    text.extend_from_slice(format!("|1|notbase64!|x ssh-ed25519 {ED2}\n").as_bytes());
    text.extend_from_slice(b"\xff\xfe invalid utf-8 \xc3\n");
    text.extend_from_slice(b"1024 35 12345 old-rsa1-format\n");
    // Unpadded base64 is tolerated.
    text.extend_from_slice(
        format!("example.com ssh-ed25519 {}\n", ED.trim_end_matches('=')).as_bytes(),
    );
    let kh = f.dir.path().join("kh");
    fs::write(&kh, text).unwrap();
    assert!(matches!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 10, .. }
    ));
    assert!(matches!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED2),
        HostKeyStatus::Mismatch { line: 10, .. }
    ));
}

#[test]
fn missing_files_are_skipped_and_precedence_spans_files() {
    let f = Files::new();
    let first = f.write("first", &format!("example.com ssh-ed25519 {ED2}\n"));
    let second = f.write("second", &format!("example.com ssh-ed25519 {ED}\n"));
    let missing = f.dir.path().join("missing");
    assert_eq!(
        check(
            &[missing.clone(), first.clone(), second.clone()],
            "example.com",
            22,
            "ssh-ed25519",
            &blob(ED)
        )
        .unwrap(),
        HostKeyStatus::Match {
            path: second,
            line: 1
        }
    );
    assert_eq!(
        check(
            &[missing.clone(), first.clone()],
            "example.com",
            22,
            "ssh-ed25519",
            &blob(ED)
        )
        .unwrap(),
        HostKeyStatus::Mismatch {
            path: first,
            line: 1,
            known_algorithm: "ssh-ed25519".into()
        }
    );
    assert_eq!(
        check(&[missing], "example.com", 22, "ssh-ed25519", &blob(ED)).unwrap(),
        HostKeyStatus::NotFound
    );
    assert_eq!(
        check(&[], "example.com", 22, "ssh-ed25519", &blob(ED)).unwrap(),
        HostKeyStatus::NotFound
    );
}

#[test]
fn learn_then_check_plain() {
    let f = Files::new();
    let kh = f.dir.path().join("new-dir/.ssh/known_hosts");
    learn(&kh, "Example.com", 22, "ssh-ed25519", &blob(ED), false).unwrap();
    learn(
        &kh,
        "example.com",
        2222,
        "ecdsa-sha2-nistp256",
        &blob(EC),
        false,
    )
    .unwrap();
    learn(&kh, "rsa.example", 22, "rsa-sha2-512", &blob(RSA), false).unwrap();
    let text = fs::read_to_string(&kh).unwrap();
    assert_eq!(
        text,
        format!(
            "example.com ssh-ed25519 {ED}\n\
             [example.com]:2222 ecdsa-sha2-nistp256 {EC}\n\
             rsa.example ssh-rsa {RSA}\n"
        )
    );
    assert!(matches!(
        check_one(&kh, "example.com", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 1, .. }
    ));
    assert!(matches!(
        check_one(&kh, "example.com", 2222, "ecdsa-sha2-nistp256", EC),
        HostKeyStatus::Match { line: 2, .. }
    ));
    assert!(matches!(
        check_one(&kh, "rsa.example", 22, "rsa-sha2-256", RSA),
        HostKeyStatus::Match { line: 3, .. }
    ));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&kh), 0o600);
        assert_eq!(mode(kh.parent().unwrap()), 0o700);
    }
}

#[test]
fn learn_terminates_an_unterminated_last_line() {
    let f = Files::new();
    let kh = f.write("kh", &format!("old.example ssh-ed25519 {ED2}"));
    learn(&kh, "new.example", 22, "ssh-ed25519", &blob(ED), false).unwrap();
    assert_eq!(
        fs::read_to_string(&kh).unwrap(),
        format!("old.example ssh-ed25519 {ED2}\nnew.example ssh-ed25519 {ED}\n")
    );
    assert!(matches!(
        check_one(&kh, "old.example", 22, "ssh-ed25519", ED2),
        HostKeyStatus::Match { line: 1, .. }
    ));
    assert!(matches!(
        check_one(&kh, "new.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 2, .. }
    ));
}

#[test]
fn learn_hashed_round_trip() {
    let f = Files::new();
    let kh = f.dir.path().join("known_hosts");
    learn(&kh, "secret.example", 22, "ssh-ed25519", &blob(ED), true).unwrap();
    learn(&kh, "secret.example", 2022, "ssh-ed25519", &blob(ED2), true).unwrap();
    let text = fs::read_to_string(&kh).unwrap();
    assert!(!text.contains("secret"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l.starts_with("|1|")));
    // Fresh salt each time: the same name hashes differently.
    assert_ne!(lines[0].split(' ').next(), lines[1].split(' ').next());
    assert!(matches!(
        check_one(&kh, "secret.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::Match { line: 1, .. }
    ));
    assert!(matches!(
        check_one(&kh, "secret.example", 2022, "ssh-ed25519", ED2),
        HostKeyStatus::Match { line: 2, .. }
    ));
    assert!(matches!(
        check_one(&kh, "secret.example", 2022, "ssh-ed25519", ED),
        HostKeyStatus::Mismatch { line: 2, .. }
    ));
    assert_eq!(
        check_one(&kh, "other.example", 22, "ssh-ed25519", ED),
        HostKeyStatus::NotFound
    );
}

#[test]
fn learn_refuses_names_that_would_corrupt_the_file() {
    let f = Files::new();
    let kh = f.dir.path().join("kh");
    for host in ["", "a b", "a,b", "@revoked", "|1|x", "!x", "a\nb", "#x"] {
        let err = learn(&kh, host, 22, "ssh-ed25519", &blob(ED), false).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{host:?}");
    }
    assert!(learn(&kh, "h", 22, "ssh-ed25519", &[], false).is_err());
    assert!(!kh.exists());
}

#[test]
fn helpers() {
    assert_eq!(host_port_name("h", 22), "h");
    assert_eq!(host_port_name("h", 2222), "[h]:2222");
    assert_eq!(key_type("rsa-sha2-512"), "ssh-rsa");
    assert_eq!(key_type("ssh-ed25519"), "ssh-ed25519");
    assert_eq!(blob_key_type(&blob(EC)), Some("ecdsa-sha2-nistp256"));
    assert_eq!(blob_key_type(&[0, 0, 0, 9, b'x']), None);
    assert_eq!(blob_key_type(&[0xff, 0xff]), None);
}

fn ca_status(path: &Path, host: &str, port: u16, ca: &str, cert_key: &str) -> CertAuthorityStatus {
    let key = blob(cert_key);
    check_cert_authority(&[path.to_path_buf()], host, port, &blob(ca), &[&key]).unwrap()
}

#[test]
fn cert_authority_trusted_for_matching_patterns_only() {
    let f = Files::new();
    let p = f.write(
        "kh",
        &format!(
            "# the CA for the example.com hosts, not for the bastion\n\
             @cert-authority *.example.com,!bastion.example.com ssh-ed25519 {ED}\n\
             @cert-authority [127.0.0.1]:2222 ecdsa-sha2-nistp256 {EC}\n"
        ),
    );
    // Host name patterns, case-insensitive, as for host keys.
    assert_eq!(
        ca_status(&p, "Web.Example.COM", 22, ED, RSA),
        CertAuthorityStatus::Trusted {
            path: p.clone(),
            line: 2
        }
    );
    // A negated pattern vetoes the line.
    assert_eq!(
        ca_status(&p, "bastion.example.com", 22, ED, RSA),
        CertAuthorityStatus::NotTrusted {
            other_authorities: 0
        }
    );
    // Not port 22: the name is [host]:port, so `*.example.com` does not
    // cover web.example.com on 2222.
    assert_eq!(
        ca_status(&p, "web.example.com", 2222, ED, RSA),
        CertAuthorityStatus::NotTrusted {
            other_authorities: 0
        }
    );
    assert_eq!(
        ca_status(&p, "127.0.0.1", 2222, EC, RSA),
        CertAuthorityStatus::Trusted {
            path: p.clone(),
            line: 3
        }
    );
    // The wrong CA for a host that has one: counted, not trusted.
    assert_eq!(
        ca_status(&p, "127.0.0.1", 2222, ED, RSA),
        CertAuthorityStatus::NotTrusted {
            other_authorities: 1
        }
    );
}

#[test]
fn a_plain_host_key_line_does_not_make_a_ca() {
    let f = Files::new();
    let p = f.write("kh", &format!("web.example.com ssh-ed25519 {ED}\n"));
    assert_eq!(
        ca_status(&p, "web.example.com", 22, ED, RSA),
        CertAuthorityStatus::NotTrusted {
            other_authorities: 0
        }
    );
}

#[test]
fn revoked_ca_or_certified_key_wins_over_trust() {
    let f = Files::new();
    let trust = format!("@cert-authority * ssh-ed25519 {ED}\n");
    let p = f.write("kh", &format!("{trust}@revoked * ssh-ed25519 {ED}\n"));
    assert_eq!(
        ca_status(&p, "web.example.com", 22, ED, RSA),
        CertAuthorityStatus::Revoked {
            path: p.clone(),
            line: 2,
            revoked_index: None,
        }
    );
    // The certified key revoked (in a second file) refuses the certificate.
    let q = f.write("kh2", &format!("@revoked * ssh-rsa {RSA}\n"));
    let files = [f.write("kh1", &trust), q.clone()];
    let key = blob(RSA);
    assert_eq!(
        check_cert_authority(&files, "web.example.com", 22, &blob(ED), &[&key]).unwrap(),
        CertAuthorityStatus::Revoked {
            path: q,
            line: 1,
            revoked_index: Some(0),
        }
    );
}

#[test]
fn hashed_cert_authority_lines_match() {
    let f = Files::new();
    // The HASHED fixture's first line is "example.com ED", hashed.
    let hashed = HASHED.lines().next().unwrap();
    let p = f.write("kh", &format!("@cert-authority {hashed}\n"));
    assert!(matches!(
        ca_status(&p, "example.com", 22, ED, RSA),
        CertAuthorityStatus::Trusted { line: 1, .. }
    ));
    assert!(matches!(
        ca_status(&p, "other.com", 22, ED, RSA),
        CertAuthorityStatus::NotTrusted { .. }
    ));
}

#[test]
fn revoked_host_keys_file_lists_keys_one_per_line() {
    let f = Files::new();
    let path = f.write(
        "revoked",
        &format!(
            "# revoked after the 2026 incident\n\n\
             ssh-rsa {RSA} old-rsa\n\
             ssh-ed25519 not-base64!!\n\
             ssh-rsa {ED} (type field does not match the blob: skipped)\n\
             ssh-ed25519 {ED2} web1\n"
        ),
    );
    assert_eq!(revoked_in(&path, &[&blob(ED2)]).unwrap(), Some(6));
    assert_eq!(revoked_in(&path, &[&blob(RSA)]).unwrap(), Some(3));
    // Any of the blobs (a certificate's CA, key and certificate) counts.
    assert_eq!(
        revoked_in(&path, &[&blob(EC), &blob(ED2)]).unwrap(),
        Some(6)
    );
    assert_eq!(revoked_in(&path, &[&blob(ED), &blob(EC)]).unwrap(), None);
}

#[test]
fn revoked_host_keys_unreadable_or_krl_is_an_error() {
    let f = Files::new();
    let missing = f.dir.path().join("no-such-file");
    let e = revoked_in(&missing, &[&blob(ED)]).unwrap_err();
    assert!(e.to_string().contains("no-such-file"), "{e}");
    let krl = f.dir.path().join("krl");
    fs::write(&krl, b"SSHKRL\n\0\x00\x00\x00\x01rest").unwrap();
    let e = revoked_in(&krl, &[&blob(ED)]).unwrap_err();
    assert!(e.to_string().contains("key revocation list"), "{e}");
}
