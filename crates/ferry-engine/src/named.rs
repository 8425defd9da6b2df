//! Copy options set by name, as text: what the Python and C bindings
//! (bindings/python, crates/ferry-capi) use so that one table serves both
//! and the names stay those of `ferry cp`'s flags (`parallel`, `streams`,
//! `identity`, `pin`, `cacert`, ...). A name may be spelled with `-` or
//! `_`; options that `ferry cp` lets you repeat (`identity`, `option`,
//! `pin`, `resolve`) add one value per call.
//!
//! It also says which exception or result code an error becomes
//! ([`ErrorClass`]): a host-key refusal and a refused login share
//! [`ErrorKind::Auth`] (one exit code) but applications tell them apart.
use std::path::PathBuf;
use std::time::Duration;

use crate::{s3, CopyOptions, ErrorKind, HttpVersion};

/// Every name [`CopyOptions::set`] accepts, in the order `ferry cp --help`
/// shows them (bindings list them in their docs and error messages).
pub const OPTION_NAMES: &[&str] = &[
    "recursive",
    "preserve",
    "resume",
    "parallel",
    "streams",
    "max_streams",
    "chunk",
    "depth",
    "window",
    "inflight",
    "ssh_config",
    "identity",
    "option",
    "jump",
    "timeout",
    "retries",
    "compress",
    "interactive",
    "http1.1",
    "http2",
    "cacert",
    "pin",
    "insecure",
    "resolve",
    "token",
    "user",
    "netrc",
    "max_redirs",
    "compressed",
    "ssl_reqd",
    "s3_endpoint",
    "s3_region",
    "s3_profile",
    "s3_no_sign_request",
    "s3_virtual_hosted",
    "s3_multipart_threshold",
    "s3_part_size",
    "s3_upload_concurrency",
    "s3_checksum",
    // Not flags of `ferry cp`, which takes keys from the environment and
    // ~/.aws only (a key on a command line shows in `ps`).
    "s3_access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
    "s3_anonymous",
];

impl CopyOptions {
    /// Set the option `name` (a `ferry cp` flag's long name; see
    /// [`OPTION_NAMES`]) from its text. Booleans take `true`/`false`
    /// (also `1`/`0`, `yes`/`no`, `on`/`off`), sizes take `256k`, `1M`,
    /// durations are seconds. The error says what was wrong.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let key = name.trim().trim_start_matches('-').replace('-', "_");
        let v = value.trim();
        match key.as_str() {
            "recursive" | "r" => self.recursive = flag(name, v)?,
            "preserve" | "p" => self.preserve = flag(name, v)?,
            "resume" => self.resume = flag(name, v)?,
            "parallel" | "P" => self.parallel = Some(count(name, v)?),
            "streams" => self.streams = Some(count(name, v)?),
            "max_streams" => self.max_streams = count(name, v)?,
            "chunk" => {
                let c = size(name, v)?;
                if c > 16 << 20 {
                    return Err(format!("{name}: at most 16M, not {v}"));
                }
                self.chunk = Some(c as u32);
            }
            "depth" => self.max_depth = count(name, v)?,
            "window" => {
                self.connect.window_size = Some(size(name, v)?.min(u64::from(u32::MAX)) as u32)
            }
            "inflight" => self.max_inflight = Some(size(name, v)?),
            "ssh_config" | "F" => self.connect.config_file = Some(PathBuf::from(v)),
            "identity" | "identity_file" | "i" => {
                self.connect.identity_files.push(PathBuf::from(v))
            }
            "option" | "ssh_option" | "o" => {
                if !v.contains('=') && !v.contains(' ') {
                    return Err(format!(
                        "{name}: expected KEY=VALUE (an ssh option), not {v:?}"
                    ));
                }
                self.connect.options.push(v.to_string())
            }
            "jump" | "J" => self.connect.proxy_jump = Some(v.to_string()),
            "timeout" => {
                let s: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("{name}: a number of seconds above 0, not {v:?}"))?;
                self.timeout = Duration::from_secs_f64(s);
            }
            "retries" => self.retries = count(name, v)? as u32,
            "compress" | "C" => {
                self.connect.compression = v.parse().map_err(|e| format!("{name}: {e}"))?
            }
            "interactive" => self.connect.interactive = flag(name, v)?,
            "http1.1" | "http1_1" | "http1" => {
                if flag(name, v)? {
                    self.http.version = HttpVersion::Http1
                }
            }
            "http2" => {
                if flag(name, v)? {
                    self.http.version = HttpVersion::Http2
                }
            }
            "cacert" => self.http.tls.cacert = Some(PathBuf::from(v)),
            "pin" => self.http.tls.pins.push(v.to_string()),
            "insecure" | "k" => self.http.tls.insecure = flag(name, v)?,
            "resolve" => self.http.resolve.push(v.to_string()),
            "token" => self.http.token = Some(v.to_string()).filter(|t| !t.is_empty()),
            "user" | "u" => self.http.user = Some(v.to_string()),
            "netrc" => self.http.netrc = flag(name, v)?,
            "no_netrc" => self.http.netrc = !flag(name, v)?,
            "max_redirs" => self.http.max_redirs = count_or_zero(name, v)? as u32,
            "compressed" => self.compressed = flag(name, v)?,
            "ssl_reqd" => self.ftp.ssl_reqd = flag(name, v)?,
            "s3_endpoint" => {
                let u = ferry_http::Url::parse(v).map_err(|e| format!("{name}: {e}"))?;
                if !u.path.is_empty() && u.path != "/" {
                    return Err(format!(
                        "{name}: give the endpoint without a path (https://host[:port]), not {v:?}"
                    ));
                }
                self.s3.endpoint = Some(v.to_string())
            }
            "s3_region" => self.s3.region = Some(nonempty(name, v)?),
            "s3_profile" => self.s3.profile = Some(nonempty(name, v)?),
            "s3_no_sign_request" => self.s3.no_sign_request = flag(name, v)?,
            "s3_virtual_hosted" => self.s3.virtual_hosted = flag(name, v)?,
            "s3_multipart_threshold" => self.s3.multipart_threshold = Some(size(name, v)?),
            // Raised to 5M and capped at 5G when the transfer starts, as
            // `--s3-part-size` is.
            "s3_part_size" => self.s3.part_size = Some(size(name, v)?),
            "s3_upload_concurrency" => self.s3.upload_concurrency = Some(count(name, v)?),
            "s3_checksum" => {
                let c = v.to_ascii_lowercase();
                if !matches!(c.as_str(), "crc32" | "md5" | "none") {
                    return Err(format!("{name}: crc32, md5 or none, not {v:?}"));
                }
                self.s3.checksum = Some(c)
            }
            "s3_access_key_id" => self.s3_keys().access_key = nonempty(name, v)?,
            "s3_secret_access_key" => self.s3_keys().secret_key = nonempty(name, v)?,
            "s3_session_token" => self.s3_keys().session_token = Some(nonempty(name, v)?),
            "s3_anonymous" => self.s3.anonymous = flag(name, v)?,
            _ => {
                return Err(format!(
                    "unknown option {name:?}; the options are: {}",
                    OPTION_NAMES.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// What [`set`](Self::set) cannot tell one name at a time: call it
    /// once every option is set (the bindings do, before a transfer
    /// starts). An S3 access key id without its secret key (or the
    /// reverse, or a session token without both) is refused here, naming
    /// the options, rather than signing with half a pair or falling back
    /// to the environment's keys.
    pub fn check_named(&self) -> Result<(), String> {
        if let Some(c) = &self.s3.credentials {
            let missing = match (c.access_key.is_empty(), c.secret_key.is_empty()) {
                (false, false) => None,
                (false, true) => Some("s3_access_key_id was given without s3_secret_access_key"),
                (true, false) => Some("s3_secret_access_key was given without s3_access_key_id"),
                (true, true) => Some(
                    "s3_session_token was given without s3_access_key_id and s3_secret_access_key",
                ),
            };
            if let Some(m) = missing {
                return Err(format!(
                    "{m}: S3 keys need both s3_access_key_id and s3_secret_access_key"
                ));
            }
            if self.s3.no_sign_request {
                return Err("s3_no_sign_request: requests are unsigned, yet s3_access_key_id and s3_secret_access_key were given; give one or the other".into());
            }
        }
        Ok(())
    }

    /// The S3 keys being set by name, one part per call (checked whole by
    /// [`check_named`](Self::check_named)).
    fn s3_keys(&mut self) -> &mut s3::Credentials {
        self.s3
            .credentials
            .get_or_insert_with(|| s3::Credentials::new("", ""))
    }
}

fn nonempty(name: &str, v: &str) -> Result<String, String> {
    if v.is_empty() {
        return Err(format!("{name}: empty"));
    }
    Ok(v.to_string())
}

fn flag(name: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("{name}: true or false, not {v:?}")),
    }
}

fn count(name: &str, v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{name}: a number of at least 1, not {v:?}")),
    }
}

fn count_or_zero(name: &str, v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .map_err(|_| format!("{name}: a number, not {v:?}"))
}

/// `32768`, `256k`, `1M`, `1G` (powers of two, as `ferry cp`).
fn size(name: &str, v: &str) -> Result<u64, String> {
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{name}: {v:?} is not a size (examples: 32768, 256k, 1M)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{name}: {v:?}: unknown unit (use k, M or G)")),
    };
    n.checked_mul(mult)
        .filter(|s| *s > 0)
        .ok_or_else(|| format!("{name}: {v:?} is out of range"))
}

/// What a binding raises or returns for an error: [`ErrorKind`] with the
/// host-key case split out of `Auth`, and `Network` kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Usage,
    Auth,
    HostKey,
    Remote,
    LocalIo,
    Network,
    Cancelled,
}

impl ErrorClass {
    /// The class of an error of `kind` with this message. The engine gives
    /// a refused host key (or TLS certificate) the kind `Auth`, as the CLI
    /// gives both exit code 3; the messages ferry-ssh and ferry-http write
    /// for those name the host key or the certificate, which is what tells
    /// them apart here.
    pub fn of(kind: ErrorKind, message: &str) -> ErrorClass {
        match kind {
            ErrorKind::Usage => ErrorClass::Usage,
            ErrorKind::Auth => {
                let m = message.to_ascii_lowercase();
                let identity = [
                    "host key",
                    "host identification",
                    "certificate",
                    "known_hosts",
                ];
                if identity.iter().any(|w| m.contains(w)) {
                    ErrorClass::HostKey
                } else {
                    ErrorClass::Auth
                }
            }
            ErrorKind::Remote => ErrorClass::Remote,
            ErrorKind::Local => ErrorClass::LocalIo,
            ErrorKind::Network => ErrorClass::Network,
            ErrorKind::Cancelled => ErrorClass::Cancelled,
        }
    }

    /// The lower-case name bindings use (`"host_key"`, `"remote"`...).
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Usage => "usage",
            ErrorClass::Auth => "auth",
            ErrorClass::HostKey => "host_key",
            ErrorClass::Remote => "remote",
            ErrorClass::LocalIo => "local_io",
            ErrorClass::Network => "network",
            ErrorClass::Cancelled => "cancelled",
        }
    }
}

/// The path a remote error names: ferry's messages about a remote file
/// begin `host:/path: what the server said` (or `URL: ...` over HTTP);
/// `None` when the message has no such prefix.
pub fn remote_error_path(message: &str) -> Option<String> {
    // "host:path: message" (SFTP) or "https://host/path: message".
    let (head, _) = message.split_once(": ")?;
    if let Some(rest) = head.split_once("://").map(|(_, r)| r) {
        let path = rest.find('/').map(|i| &rest[i..])?;
        return Some(path.to_string());
    }
    let (_, path) = head.split_once(':')?;
    (!path.is_empty()).then(|| path.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_cli_flags_set_their_fields() {
        let mut o = CopyOptions::default();
        o.set("recursive", "true").unwrap();
        o.set("parallel", "8").unwrap();
        o.set("chunk", "256k").unwrap();
        o.set("identity", "/k1").unwrap();
        o.set("identity", "/k2").unwrap();
        o.set("option", "StrictHostKeyChecking=accept-new").unwrap();
        o.set("max-redirs", "0").unwrap();
        o.set("http1.1", "yes").unwrap();
        o.set("timeout", "2.5").unwrap();
        assert!(o.recursive);
        assert_eq!(o.parallel, Some(8));
        assert_eq!(o.chunk, Some(256 * 1024));
        assert_eq!(o.connect.identity_files.len(), 2);
        assert_eq!(o.connect.options, ["StrictHostKeyChecking=accept-new"]);
        assert_eq!(o.http.max_redirs, 0);
        assert_eq!(o.http.version, HttpVersion::Http1);
        assert_eq!(o.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn bad_names_and_values_say_what_is_wrong() {
        let mut o = CopyOptions::default();
        assert!(o.set("paralel", "8").unwrap_err().contains("parallel"));
        assert!(o.set("parallel", "0").unwrap_err().contains("at least 1"));
        assert!(o.set("chunk", "64M").unwrap_err().contains("16M"));
        assert!(o
            .set("resume", "maybe")
            .unwrap_err()
            .contains("true or false"));
    }

    #[test]
    fn s3_names_set_the_s3_options() {
        let mut o = CopyOptions::default();
        o.set("s3_endpoint", "https://127.0.0.1:9000").unwrap();
        o.set("s3-region", "eu-west-3").unwrap();
        o.set("s3_profile", "work").unwrap();
        o.set("s3_virtual_hosted", "true").unwrap();
        o.set("s3_multipart_threshold", "64M").unwrap();
        o.set("s3_part_size", "8M").unwrap();
        o.set("s3_upload_concurrency", "4").unwrap();
        o.set("s3_checksum", "MD5").unwrap();
        o.set("s3_anonymous", "false").unwrap();
        o.set("s3_no_sign_request", "yes").unwrap();
        let s = &o.s3;
        assert_eq!(s.endpoint.as_deref(), Some("https://127.0.0.1:9000"));
        assert_eq!(s.region.as_deref(), Some("eu-west-3"));
        assert_eq!(s.profile.as_deref(), Some("work"));
        assert!(s.virtual_hosted && s.no_sign_request && !s.anonymous);
        assert_eq!(s.multipart_threshold, Some(64 << 20));
        assert_eq!(s.part_size, Some(8 << 20));
        assert_eq!(s.upload_concurrency, Some(4));
        assert_eq!(s.checksum.as_deref(), Some("md5"));
        assert!(o.check_named().is_ok());
    }

    #[test]
    fn s3_keys_by_name_come_before_the_environment() {
        let mut o = CopyOptions::default();
        o.set("s3_access_key_id", "AKIDNAMED").unwrap();
        o.set("s3_secret_access_key", "named-secret").unwrap();
        o.set("s3_session_token", "tok").unwrap();
        o.check_named().unwrap();
        let c = o.s3.credentials.clone().unwrap();
        assert_eq!(
            (c.access_key.as_str(), c.secret_key.as_str()),
            ("AKIDNAMED", "named-secret")
        );
        assert_eq!(c.session_token.as_deref(), Some("tok"));
        // The environment's keys (and token) lose to them.
        let env: std::collections::HashMap<String, String> = [
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_SESSION_TOKEN", "env-token"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        o.s3.aws_config = Some(s3::AwsConfig::new(env, None));
        let cfg = s3::config(&o.s3).unwrap();
        let used = cfg.creds.unwrap();
        assert_eq!(used.access_key, "AKIDNAMED");
        assert_eq!(used.session_token.as_deref(), Some("tok"));
        assert_eq!(cfg.creds_from, s3::FROM_OPTIONS);
    }

    #[test]
    fn half_an_s3_key_pair_is_refused_naming_both_options() {
        for (name, value) in [
            ("s3_secret_access_key", "s"),
            ("s3_access_key_id", "a"),
            ("s3_session_token", "t"),
        ] {
            let mut o = CopyOptions::default();
            o.set(name, value).unwrap();
            let e = o.check_named().unwrap_err();
            assert!(
                e.contains("s3_access_key_id") && e.contains("s3_secret_access_key"),
                "{name}: {e}"
            );
            assert!(e.starts_with(name), "{e}");
            // The engine refuses it too, for a binding that skips the check.
            assert!(s3::config(&o.s3).unwrap_err().contains("s3_access_key_id"));
        }
        let mut o = CopyOptions::default();
        o.set("s3_access_key_id", "a").unwrap();
        o.set("s3_secret_access_key", "s").unwrap();
        o.set("s3_no_sign_request", "true").unwrap();
        assert!(o.check_named().unwrap_err().contains("s3_no_sign_request"));
    }

    #[test]
    fn s3_no_sign_request_ignores_every_key() {
        let env: std::collections::HashMap<String, String> = [
            ("AWS_ACCESS_KEY_ID", "AKIDENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut o = CopyOptions::default();
        o.s3.aws_config = Some(s3::AwsConfig::new(env, None));
        assert!(s3::config(&o.s3).unwrap().creds.is_some());
        o.set("s3_no_sign_request", "true").unwrap();
        let cfg = s3::config(&o.s3).unwrap();
        assert!(cfg.creds.is_none() && cfg.creds_source.is_none() && cfg.no_sign_request);
        // Without it and without anonymous, no keys is an error.
        let mut o = CopyOptions::default();
        o.set("s3_anonymous", "false").unwrap();
        assert!(s3::config(&o.s3).is_err());
        o.set("s3_anonymous", "true").unwrap();
        assert!(s3::config(&o.s3).unwrap().creds.is_none());
    }

    #[test]
    fn bad_s3_values_say_what_is_wrong() {
        let mut o = CopyOptions::default();
        let e = o.set("s3_checksum", "sha1").unwrap_err();
        assert!(
            e.contains("crc32, md5 or none") && e.contains("sha1"),
            "{e}"
        );
        let e = o.set("s3_part_size", "8X").unwrap_err();
        assert!(e.contains("s3_part_size") && e.contains("unit"), "{e}");
        let e = o.set("s3_multipart_threshold", "lots").unwrap_err();
        assert!(e.contains("not a size"), "{e}");
        let e = o.set("s3_upload_concurrency", "0").unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        let e = o.set("s3_endpoint", "https://h:9000/bucket").unwrap_err();
        assert!(e.contains("without a path"), "{e}");
        assert!(o.set("s3_endpoint", "not a url").is_err());
        let e = o.set("s3_access_key_id", "").unwrap_err();
        assert!(e.contains("s3_access_key_id: empty"), "{e}");
        assert!(o.set("s3_virtual_hosted", "maybe").is_err());
        // Unknown names list the S3 ones.
        assert!(o
            .set("s3_secret", "x")
            .unwrap_err()
            .contains("s3_secret_access_key"));
    }

    #[test]
    fn every_listed_name_is_accepted() {
        for n in OPTION_NAMES {
            let v = match *n {
                "s3_endpoint" => "https://127.0.0.1:9000",
                "s3_checksum" => "none",
                "option" => "A=b",
                "compress" => "off",
                "chunk" | "window" | "inflight" | "s3_multipart_threshold" | "s3_part_size" => "1M",
                "timeout"
                | "parallel"
                | "streams"
                | "max_streams"
                | "depth"
                | "retries"
                | "max_redirs"
                | "s3_upload_concurrency" => "2",
                _ => "true",
            };
            CopyOptions::default()
                .set(n, v)
                .unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }

    #[test]
    fn host_key_refusals_are_told_from_login_refusals() {
        let hk = "host key verification failed: no ssh-ed25519 key for [127.0.0.1]:2222 is known";
        assert_eq!(ErrorClass::of(ErrorKind::Auth, hk), ErrorClass::HostKey);
        let auth = "alice@127.0.0.1: authentication failed (tried publickey)";
        assert_eq!(ErrorClass::of(ErrorKind::Auth, auth), ErrorClass::Auth);
    }

    #[test]
    fn remote_paths_come_from_the_message() {
        assert_eq!(
            remote_error_path("127.0.0.1:/srv/x: No such file").as_deref(),
            Some("/srv/x")
        );
        assert_eq!(
            remote_error_path("https://h:8443/a/b: 404 Not Found").as_deref(),
            Some("/a/b")
        );
        assert_eq!(remote_error_path("no prefix here"), None);
    }
}
