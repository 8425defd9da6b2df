//! `ferry cp` to and from S3 with credentials from STS, against moto's
//! server on 127.0.0.1 as both STS and S3 (tests/common/moto.rs): a
//! `role_arn` profile with a `source_profile` (and a role chained on it),
//! with moto checking signatures and policies, so an upload that works was
//! signed with the role's keys; web identity from the environment; the
//! container credentials endpoint; EC2 instance metadata (IMDSv2, from
//! amazon-ec2-metadata-mock: tests/common/ec2_metadata.rs) as the chain's
//! last link and as a role's `credential_source`, and what IMDS that is
//! not there costs; and the errors of a refused source and of an
//! `mfa_serial` profile. Every byte is compared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::ec2_metadata::ec2_metadata_mock_or_skip;
use common::moto::{moto_or_skip, Moto};
use common::versitygw::{data, versitygw_or_skip};
use common::*;

/// The environment of a ferry run against `m` with the AWS files in
/// `dir` (`config`, `credentials`) and nothing else of AWS.
fn env_for(m: &Moto, dir: &Path, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vec![
        ("AWS_ENDPOINT_URL".to_string(), m.endpoint()),
        ("AWS_REGION".into(), "us-east-1".into()),
        (
            "AWS_CONFIG_FILE".into(),
            dir.join("config").display().to_string(),
        ),
        (
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            dir.join("credentials").display().to_string(),
        ),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

fn run(dir: &Path, env: &[(String, String)], args: &[std::ffi::OsString]) -> std::process::Output {
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    ferry_in(dir, args, &envs)
}

/// Upload 20 MiB to `key` (in 5 MiB parts) and download it again: the
/// bytes must come back. `key` is one of the harness's placeholders.
fn round_trip(dir: &Path, env: &[(String, String)], key: &str, seed: u8) {
    let src = dir.join(format!("{key}.bin"));
    fs::write(&src, data(20 * 1024 * 1024 + 11, seed)).unwrap();
    let o = run(
        dir,
        env,
        &args![
            "cp",
            "-q",
            &src,
            format!("s3://bkt/{key}"),
            "--s3-part-size",
            "5M"
        ],
    );
    assert_ok(&o, &format!("upload {key}"));
    let back = dir.join(format!("{key}.back"));
    let o = run(
        dir,
        env,
        &args!["cp", "-q", format!("s3://bkt/{key}"), &back],
    );
    assert_ok(&o, &format!("download {key}"));
    assert_eq!(
        fs::read(&back).unwrap(),
        fs::read(&src).unwrap(),
        "{key} back"
    );
}

#[test]
fn role_profiles_assume_the_role() {
    let Some(m) = moto_or_skip("role_profiles_assume_the_role", true) else {
        return;
    };
    let t = tempdir();
    fs::write(
        t.path().join("credentials"),
        format!(
            "[base]\naws_access_key_id = {}\naws_secret_access_key = {}\n[wrong]\naws_access_key_id = {}\naws_secret_access_key = nope\n",
            m.access_key, m.secret_key, m.access_key
        ),
    )
    .unwrap();
    fs::write(
        t.path().join("config"),
        format!(
            "[profile dev]\nrole_arn = {r}\nsource_profile = base\nrole_session_name = ferry-test\nduration_seconds = 900\n\
             [profile chained]\nrole_arn = {r}\nsource_profile = dev\n\
             [profile refused]\nrole_arn = {r}\nsource_profile = wrong\n\
             [profile mfa]\nrole_arn = {r}\nsource_profile = base\nmfa_serial = arn:aws:iam::123456789012:mfa/me\n",
            r = m.role_arn
        ),
    )
    .unwrap();

    // The user's own keys may not touch S3: moto enforces policies.
    let direct = env_for(&m, t.path(), &[("AWS_PROFILE", "base")]);
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let o = run(t.path(), &direct, &args!["cp", "-q", &f, "s3://bkt/direct"]);
    assert_code(&o, 3, "the user's keys, refused by S3");
    assert!(stderr_text(&o).contains("AccessDenied"), "{}", describe(&o));

    let before = m.sts_calls();
    let env = env_for(&m, t.path(), &[("AWS_PROFILE", "dev")]);
    round_trip(t.path(), &env, "role", 1);
    // One AssumeRole per ferry run (two runs).
    assert_eq!(m.sts_calls() - before, 2, "{}", m.log());

    // --s3-profile, as the AWS CLI's --profile, sets the environment's
    // keys aside (AWS_PROFILE would not).
    let env = env_for(
        &m,
        t.path(),
        &[
            ("AWS_ACCESS_KEY_ID", "WRONG"),
            ("AWS_SECRET_ACCESS_KEY", "wrong"),
        ],
    );
    let o = run(
        t.path(),
        &env,
        &args!["cp", "-q", "--s3-profile", "dev", &f, "s3://bkt/role"],
    );
    assert_ok(&o, "--s3-profile dev with other keys in the environment");

    // A role assumed with the keys of another role.
    let before = m.sts_calls();
    let env = env_for(&m, t.path(), &[("AWS_PROFILE", "chained")]);
    round_trip(t.path(), &env, "chained", 2);
    assert_eq!(m.sts_calls() - before, 4, "two AssumeRole per run");

    // STS refuses the source's keys: exit 3, naming the profile and role.
    let env = env_for(&m, t.path(), &[("AWS_PROFILE", "refused")]);
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/refused"]);
    assert_code(&o, 3, "refused source");
    let e = stderr_text(&o);
    assert!(
        e.contains(&m.role_arn) && e.contains("\"refused\"") && e.contains("SignatureDoesNotMatch"),
        "{e}"
    );

    // mfa_serial: refused before any request, saying what to do.
    let before = m.sts_calls();
    let env = env_for(&m, t.path(), &[("AWS_PROFILE", "mfa")]);
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/mfa"]);
    assert_code(&o, 2, "mfa_serial");
    let e = stderr_text(&o);
    assert!(
        e.contains("mfa_serial") && e.contains("AWS_SESSION_TOKEN"),
        "{e}"
    );
    assert_eq!(m.sts_calls(), before);
}

#[test]
fn web_identity_from_the_environment() {
    // moto cannot check an unsigned request's authorization: without it.
    let Some(m) = moto_or_skip("web_identity_from_the_environment", false) else {
        return;
    };
    let t = tempdir();
    let token = t.path().join("token");
    fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl\n").unwrap();
    let before = m.sts_calls();
    let env = env_for(
        &m,
        t.path(),
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &token.display().to_string()),
            ("AWS_ROLE_ARN", &m.role_arn),
            ("AWS_ROLE_SESSION_NAME", "ferry-web"),
        ],
    );
    round_trip(t.path(), &env, "web", 3);
    assert_eq!(m.sts_calls() - before, 2, "{}", m.log());
    // No token file: said, naming it.
    let env = env_for(
        &m,
        t.path(),
        &[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/token"),
            ("AWS_ROLE_ARN", &m.role_arn),
        ],
    );
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/x"]);
    assert_code(&o, 3, "missing token file");
    assert!(
        stderr_text(&o).contains("/nonexistent/token"),
        "{}",
        describe(&o)
    );
}

/// A container credentials endpoint on 127.0.0.1 that wants
/// `Authorization: token` and serves `json`; counts the requests.
fn container_endpoint(token: &'static str, json: String) -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { break };
            let mut buf = [0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
            counted.fetch_add(1, Ordering::SeqCst);
            let (status, body) = if req.contains(&format!("authorization: {token}\r\n")) {
                ("200 OK", json.clone())
            } else {
                ("401 Unauthorized", String::new())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, calls)
}

#[test]
fn container_credentials_endpoint() {
    let Some(m) = moto_or_skip("container_credentials_endpoint", true) else {
        return;
    };
    let (a, s, tok) = m.assumed_role_keys();
    let json = format!(
        r#"{{"AccessKeyId":"{a}","SecretAccessKey":"{s}","Token":"{tok}","Expiration":"2999-01-01T00:00:00Z"}}"#
    );
    let (port, calls) = container_endpoint("ferry-container-token", json);
    let t = tempdir();
    let token_file = t.path().join("token");
    fs::write(&token_file, "ferry-container-token\n").unwrap();
    let uri = format!("http://127.0.0.1:{port}/v1/credentials");
    let env = env_for(
        &m,
        t.path(),
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                &token_file.display().to_string(),
            ),
        ],
    );
    round_trip(t.path(), &env, "container", 4);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // A wrong token: the endpoint's 401, named.
    let env = env_for(
        &m,
        t.path(),
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong"),
        ],
    );
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/x"]);
    assert_code(&o, 3, "wrong container token");
    assert!(stderr_text(&o).contains("401"), "{}", describe(&o));
    // Plain http to another host: refused before any request.
    let env = env_for(
        &m,
        t.path(),
        &[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://192.0.2.1/creds",
        )],
    );
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/x"]);
    assert_code(&o, 2, "http to a remote host");
    assert!(stderr_text(&o).contains("https"), "{}", describe(&o));
}

/// The environment of a run that reads EC2 instance metadata at `endpoint`
/// (the harness turns it off for every other run).
fn with_imds(mut env: Vec<(String, String)>, endpoint: &str) -> Vec<(String, String)> {
    env.push(("AWS_EC2_METADATA_DISABLED".into(), "false".into()));
    env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT".into(), endpoint.into()));
    env
}

#[test]
fn instance_metadata_is_the_last_link() {
    let Some(m) = moto_or_skip("instance_metadata_is_the_last_link", true) else {
        return;
    };
    // IMDS serves keys STS gave for the role: moto checks every
    // signature and policy, so a round trip that works signed with them.
    let (a, s, tok) = m.assumed_role_keys();
    let Some(aemm) =
        ec2_metadata_mock_or_skip("instance_metadata_is_the_last_link", (&a, &s, &tok))
    else {
        return;
    };
    let t = tempdir();
    let env = with_imds(env_for(&m, t.path(), &[]), &aemm.endpoint());
    round_trip(t.path(), &env, "imds", 5);
    // The same run without IMDS has no keys: unsigned, refused.
    let mut off = env_for(&m, t.path(), &[]);
    off.push(("AWS_EC2_METADATA_DISABLED".into(), "true".into()));
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let o = run(t.path(), &off, &args!["cp", "-q", &f, "s3://bkt/imds"]);
    assert!(
        !o.status.success(),
        "unsigned upload accepted: {}",
        describe(&o)
    );
    // Keys from the environment come first: IMDS's are not used.
    let env = with_imds(
        env_for(
            &m,
            t.path(),
            &[
                ("AWS_ACCESS_KEY_ID", &m.access_key),
                ("AWS_SECRET_ACCESS_KEY", &m.secret_key),
            ],
        ),
        &aemm.endpoint(),
    );
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/imds"]);
    assert_code(&o, 3, "the user's own keys, not IMDS's");
    assert!(stderr_text(&o).contains("AccessDenied"), "{}", describe(&o));
}

#[test]
fn credential_source_ec2_instance_metadata() {
    let Some(m) = moto_or_skip("credential_source_ec2_instance_metadata", true) else {
        return;
    };
    // IMDS serves the user's keys (which may only assume the role); the
    // profile assumes the role with them.
    let Some(aemm) = ec2_metadata_mock_or_skip(
        "credential_source_ec2_instance_metadata",
        (&m.access_key, &m.secret_key, ""),
    ) else {
        return;
    };
    let t = tempdir();
    fs::write(
        t.path().join("config"),
        format!(
            "[profile ec2]\nrole_arn = {}\ncredential_source = Ec2InstanceMetadata\n",
            m.role_arn
        ),
    )
    .unwrap();
    let before = m.sts_calls();
    let env = with_imds(
        env_for(&m, t.path(), &[("AWS_PROFILE", "ec2")]),
        &aemm.endpoint(),
    );
    round_trip(t.path(), &env, "imdsrole", 6);
    assert_eq!(m.sts_calls() - before, 2, "one AssumeRole per run");
    // IMDS unreachable: an error naming it (not unsigned requests).
    let dead = free_port();
    let env = with_imds(
        env_for(&m, t.path(), &[("AWS_PROFILE", "ec2")]),
        &format!("http://127.0.0.1:{dead}"),
    );
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let o = run(t.path(), &env, &args!["cp", "-q", &f, "s3://bkt/imdsrole"]);
    assert_code(&o, 3, "IMDS unreachable for credential_source");
    let e = stderr_text(&o);
    assert!(
        e.contains(&format!("127.0.0.1:{dead}")) && e.contains("\"ec2\""),
        "{e}"
    );
}

/// Without credentials, IMDS that is not there costs at most about its
/// timeout, and the run goes on unsigned as before; a refusal says what
/// IMDS answered.
#[test]
fn no_instance_metadata_costs_at_most_its_timeout() {
    let Some(gw) = versitygw_or_skip("no_instance_metadata_costs_at_most_its_timeout", &["bkt"])
    else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let base: Vec<(String, String)> = gw
        .env()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"))
        .collect();
    let timed = |env: &[(String, String)]| {
        let start = std::time::Instant::now();
        let o = run(t.path(), env, &args!["cp", "-q", &f, "s3://bkt/f"]);
        (o, start.elapsed())
    };
    let (o, baseline) = timed(&base);
    assert_code(&o, 3, "unsigned, IMDS off");
    // Nothing listening: refused at once.
    let dead = free_port();
    let (o, took) = timed(&with_imds(
        base.clone(),
        &format!("http://127.0.0.1:{dead}"),
    ));
    assert_code(&o, 3, "unsigned after IMDS refused the connection");
    let e = stderr_text(&o);
    assert!(
        e.contains("no credentials were found")
            && e.contains(&format!("IMDS) at http://127.0.0.1:{dead}")),
        "{e}"
    );
    assert!(
        took < baseline + std::time::Duration::from_millis(900),
        "{took:?} against {baseline:?}"
    );
    // A server that accepts and never answers: the token PUT's second, and
    // (as botocore, for containers behind a hop limit) IMDSv1's.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming() {
            held.push(s);
        }
    });
    let (o, took) = timed(&with_imds(
        base.clone(),
        &format!("http://127.0.0.1:{silent}"),
    ));
    assert_code(&o, 3, "unsigned after IMDS gave no answer");
    assert!(
        stderr_text(&o).contains("no answer within 1 s"),
        "{}",
        describe(&o)
    );
    assert!(
        took < baseline + std::time::Duration::from_millis(2600),
        "{took:?} against {baseline:?}"
    );
    // With IMDSv1 turned off, one timeout.
    let mut v2 = with_imds(base.clone(), &format!("http://127.0.0.1:{silent}"));
    v2.push(("AWS_EC2_METADATA_V1_DISABLED".into(), "true".into()));
    let (o, took) = timed(&v2);
    assert_code(&o, 3, "unsigned after IMDS gave no answer, v1 off");
    assert!(
        took < baseline + std::time::Duration::from_millis(1600),
        "{took:?} against {baseline:?}"
    );
}
