//! `credential_process` without I/O: the command line split into words as
//! the AWS CLI splits it on POSIX (Python's `shlex.split`: no shell, so no
//! `$VAR`, `~` or pipes, as AWS documents), the JSON the process prints,
//! and when credentials that expire should be fetched again. Running the
//! process is `backend::s3`'s (docs/internals/s3.md, "credential_process").
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Credentials;

/// Credentials are fetched again this long before they expire (the AWS
/// SDKs refresh a few minutes ahead: botocore 15 and 10 minutes, the Go
/// SDK 5 by default), or after half their life when that is shorter.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// `credential_process = ...` of a profile, to be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialProcess {
    pub profile: String,
    pub command: String,
}

/// What the process printed, checked.
#[derive(Debug, Clone)]
pub struct ProcessCredentials {
    pub creds: Credentials,
    /// `Expiration`, when given: the credentials stop working then.
    pub expiration: Option<SystemTime>,
}

/// The command line as words, as Python's `shlex.split` (what the AWS CLI
/// uses on POSIX) makes them: blanks separate words; `'...'` is literal;
/// in `"..."` a backslash escapes only `"` and `\`; outside quotes a
/// backslash escapes the next character; `#` is not a comment.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    // A word has started (so `""` is an empty word, not nothing).
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("no closing quotation (')".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(n @ ('"' | '\\')) => cur.push(n),
                            Some(n) => {
                                cur.push('\\');
                                cur.push(n);
                            }
                            None => return Err("no closing quotation (\")".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("no closing quotation (\")".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(n) => cur.push(n),
                    None => return Err("a backslash ends the line".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// The process's standard output: `{"Version": 1, "AccessKeyId": ...,
/// "SecretAccessKey": ..., "SessionToken"?: ..., "Expiration"?: ...}`.
/// Errors never quote the output (it holds secrets).
pub fn parse_output(stdout: &[u8]) -> Result<ProcessCredentials, String> {
    let v: serde_json::Value = serde_json::from_slice(stdout).map_err(|e| {
        format!(
            "its output is not JSON ({} bytes; {e}): it must print {{\"Version\": 1, \"AccessKeyId\": ..., \"SecretAccessKey\": ...}}",
            stdout.len()
        )
    })?;
    let obj = v
        .as_object()
        .ok_or("its output is JSON but not an object")?;
    match obj.get("Version") {
        Some(n) if n.as_u64() == Some(1) => {}
        Some(other) => {
            return Err(format!(
                "its output has \"Version\": {other}; only 1 is known"
            ))
        }
        None => return Err("its output has no \"Version\" (want 1)".into()),
    }
    let string = |k: &str| -> Result<Option<String>, String> {
        match obj.get(k) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("its output's \"{k}\" is not a string")),
        }
    };
    let access_key = string("AccessKeyId")?.ok_or("its output has no \"AccessKeyId\"")?;
    let secret_key = string("SecretAccessKey")?.ok_or("its output has no \"SecretAccessKey\"")?;
    let session_token = string("SessionToken")?;
    let expiration = match string("Expiration")? {
        None => None,
        Some(s) => Some(parse_expiration(&s).ok_or_else(|| {
            format!(
                "its output's \"Expiration\" {s:?} is not an ISO 8601 time (2026-01-02T03:04:05Z)"
            )
        })?),
    };
    Ok(ProcessCredentials {
        creds: Credentials {
            access_key,
            secret_key,
            session_token,
        },
        expiration,
    })
}

/// An RFC 3339 / ISO 8601 time: `2026-01-02T03:04:05Z`, with or without
/// fractions, or with an offset (`+01:00`, `-0500`).
pub fn parse_expiration(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', 't', ' '])?;
    let (clock, offset) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0i64)
    } else if let Some(i) = time.rfind(['+', '-']) {
        let (c, off) = time.split_at(i);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let digits: String = off[1..].chars().filter(|c| *c != ':').collect();
        if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let h: i64 = digits[..2].parse().ok()?;
        let m: i64 = digits[2..].parse().ok()?;
        (c, sign * (h * 3600 + m * 60))
    } else {
        // No zone: the SDKs take UTC.
        (time, 0)
    };
    let secs = super::xml::parse_iso8601(&format!("{date}T{clock}"))? - offset;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// When credentials fetched at `now` that expire at `expiration` should be
/// fetched again: [`REFRESH_MARGIN`] before, or halfway when they were
/// given for less than twice that. `None`: they do not expire.
pub fn refresh_at(now: SystemTime, expiration: Option<SystemTime>) -> Option<SystemTime> {
    let exp = expiration?;
    let life = exp.duration_since(now).unwrap_or_default();
    Some(exp - REFRESH_MARGIN.min(life / 2))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        split_words(s).unwrap()
    }

    #[test]
    fn words_as_shlex_splits_them() {
        assert_eq!(
            w("/opt/bin/awscreds-custom --username helen"),
            ["/opt/bin/awscreds-custom", "--username", "helen"]
        );
        assert_eq!(
            w(r#""/opt/my tools/creds" "a b"  c"#),
            ["/opt/my tools/creds", "a b", "c"]
        );
        assert_eq!(w("'it''s' x'y z'"), ["its", "xy z"]);
        assert_eq!(w(r#"a\ b c\"d"#), ["a b", "c\"d"]);
        assert_eq!(w(r#""q\"x\\y\$z""#), [r#"q"x\y\$z"#]);
        assert_eq!(w(r#"a "" b"#), ["a", "", "b"]);
        // No shell: variables, ~ and # are plain characters.
        assert_eq!(w("cmd $HOME ~/x #c"), ["cmd", "$HOME", "~/x", "#c"]);
        assert!(w("   ").is_empty());
        assert!(split_words("cmd 'open").is_err());
        assert!(split_words("cmd \"open").is_err());
        assert!(split_words("cmd \\").is_err());
    }

    #[test]
    fn output_parsed_and_checked() {
        let p = parse_output(
            br#"{"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK",
                "SessionToken": "T", "Expiration": "2026-11-27T10:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(p.creds.access_key, "AK");
        assert_eq!(p.creds.secret_key, "SK");
        assert_eq!(p.creds.session_token.as_deref(), Some("T"));
        assert_eq!(
            p.expiration,
            Some(UNIX_EPOCH + Duration::from_secs(1_795_773_600))
        );
        let p = parse_output(br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"S"}"#).unwrap();
        assert!(p.creds.session_token.is_none() && p.expiration.is_none());

        let err = |s: &[u8]| parse_output(s).unwrap_err();
        assert!(err(b"not json secret").contains("not JSON"));
        assert!(!err(b"not json secret").contains("secret"));
        assert!(err(b"[1]").contains("not an object"));
        assert!(
            err(br#"{"Version":2,"AccessKeyId":"A","SecretAccessKey":"S"}"#).contains("Version")
        );
        assert!(err(br#"{"AccessKeyId":"A","SecretAccessKey":"S"}"#).contains("Version"));
        assert!(err(br#"{"Version":1,"SecretAccessKey":"S"}"#).contains("AccessKeyId"));
        assert!(err(br#"{"Version":1,"AccessKeyId":"A"}"#).contains("SecretAccessKey"));
        assert!(
            err(br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":""}"#)
                .contains("SecretAccessKey")
        );
        assert!(
            err(br#"{"Version":1,"AccessKeyId":5,"SecretAccessKey":"S"}"#).contains("not a string")
        );
        assert!(err(
            br#"{"Version":1,"AccessKeyId":"A","SecretAccessKey":"S","Expiration":"soon"}"#
        )
        .contains("Expiration"));
    }

    #[test]
    fn expiration_formats() {
        let t = |s: &str| {
            parse_expiration(s)
                .map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs())
                .unwrap_or(0)
        };
        assert_eq!(t("1970-01-01T00:01:00Z"), 60);
        assert_eq!(t("1970-01-01T00:01:00.123456Z"), 60);
        assert_eq!(t("1970-01-01T01:01:00+01:00"), 60);
        assert_eq!(t("1970-01-01T00:00:00-0001"), 60);
        assert_eq!(t("1970-01-01T00:01:00"), 60);
        assert_eq!(t("1970-01-01 00:01:00Z"), 60);
        assert_eq!(t("tomorrow"), 0);
        assert_eq!(t("1970-01-01T00:01:00+1"), 0);
    }

    #[test]
    fn refreshed_before_they_expire() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(refresh_at(now, None), None);
        let hour = now + Duration::from_secs(3600);
        assert_eq!(refresh_at(now, Some(hour)), Some(hour - REFRESH_MARGIN));
        // Short-lived: halfway.
        let soon = now + Duration::from_secs(4);
        assert_eq!(
            refresh_at(now, Some(soon)),
            Some(now + Duration::from_secs(2))
        );
        // Already expired: at once.
        let past = now - Duration::from_secs(4);
        assert_eq!(refresh_at(now, Some(past)), Some(past));
    }
}
