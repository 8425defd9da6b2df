//! S3 without I/O: where a bucket lives (endpoint, region, path-style or
//! virtual-hosted addressing), whose credentials sign for it (given in
//! [`S3Options`], or the AWS tools' chain when the application asks for
//! it: flags, environment, `~/.aws/credentials` and `config`),
//! SigV4 signing ([`sigv4`]), the XML answers ([`xml`]), multipart part
//! sizes, and what an S3 error means for the user. The requests themselves
//! are made by `backend::s3` over ferry's own HTTP client.
//!
//! docs/internals/s3.md has the design and the measurements.
pub mod chain;
pub mod imds;
pub mod process;
pub mod provider;
pub mod sigv4;
pub mod sts;
pub mod xml;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use chain::CredentialSource;
pub use process::CredentialProcess;
pub use provider::{CredentialsProvider, ExpiringCredentials, ProvideCredentials};
pub use sigv4::Credentials;

/// S3's limits (<https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html>).
pub const MAX_PARTS: u64 = 10_000;
pub const MIN_PART: u64 = 5 << 20;
pub const MAX_PART: u64 = 5 << 30;
/// The largest object one CopyObject copies; bigger ones are copied in
/// parts (UploadPartCopy).
pub const MAX_COPY: u64 = 5 << 30;

/// How to reach S3 and what to sign with. The engine reads nothing from
/// the process environment: keys come from [`credentials`](Self::credentials)
/// or [`provider`](Self::provider), or from the AWS variables and files
/// when the application hands them over in [`aws_config`](Self::aws_config)
/// (what the `ferry` binary and the Python and C bindings do, so they
/// behave as the AWS CLI). With none of these the S3 backend fails with
/// [`TransferError::Usage`](crate::TransferError::Usage), unless
/// [`anonymous`](Self::anonymous).
///
/// ```no_run
/// use ferry_engine::s3::{Credentials, S3Options};
/// let s3 = S3Options {
///     endpoint: Some("https://minio.local:9000".into()),
///     credentials: Some(Credentials::new("AKIA...", "secret")),
///     ..S3Options::default()
/// };
/// ```
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// `--s3-endpoint`: `https://host[:port]` of an S3-compatible store
    /// (else `AWS_ENDPOINT_URL...` from `aws_config`, else AWS).
    pub endpoint: Option<String>,
    /// Region to sign for (else from `aws_config`, else `us-east-1`).
    pub region: Option<String>,
    /// `--s3-profile`: the profile of the AWS files (else `AWS_PROFILE`,
    /// else `default`); needs `aws_config`. As the AWS CLI's `--profile`,
    /// it sets the `AWS_*` keys and web identity variables aside.
    pub profile: Option<String>,
    /// Keys to sign with. They come first: before `provider` and anything
    /// `aws_config` holds.
    pub credentials: Option<Credentials>,
    /// The application's source of keys, asked when the backend opens and
    /// again before they expire (see [`ProvideCredentials`]). Used when
    /// `credentials` is `None`; comes before `aws_config`.
    pub provider: Option<CredentialsProvider>,
    /// Read what the AWS CLI reads, from here: `AWS_*` variables
    /// (keys, `AWS_PROFILE`, region, endpoint, `AWS_CA_BUNDLE`, the files'
    /// paths) and `~/.aws/credentials` and `config` (a profile's keys or
    /// its `credential_process`, which is then run). `None` (the default):
    /// none of it is read.
    pub aws_config: Option<AwsConfig>,
    /// With no credentials from the above, send requests unsigned (public
    /// buckets) instead of failing. The `ferry` binary sets it.
    pub anonymous: bool,
    /// Send every request unsigned and look for no credentials at all
    /// (`credentials`, `provider` and the keys `aws_config` holds are
    /// ignored), as the AWS CLI's `--no-sign-request`: a public bucket
    /// read while keys for another store are in the environment.
    pub no_sign_request: bool,
    /// Bucket in the host name (`bucket.host`) instead of the path.
    pub virtual_hosted: bool,
    /// Objects at least this big are uploaded in parts (default 16 MiB).
    pub multipart_threshold: Option<u64>,
    /// Part size wanted (default 8 MiB; raised so a file fits in 10,000).
    pub part_size: Option<u64>,
    /// Parts of one file uploaded at once (default 8).
    pub upload_concurrency: Option<usize>,
    /// `crc32` (default), `md5` or `none`.
    pub checksum: Option<String>,
}

pub const DEFAULT_THRESHOLD: u64 = 16 << 20;
pub const DEFAULT_PART: u64 = 8 << 20;
pub const DEFAULT_CONCURRENCY: usize = 8;

/// Which integrity header uploads carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    /// `x-amz-checksum-crc32` (S3's flexible checksums): cheap to compute,
    /// checked by the store, kept with the object.
    Crc32,
    /// `Content-MD5`: what every S3 implementation checks.
    Md5,
    None,
}

/// Where [`S3Options::aws_config`] reads the AWS variables and files:
/// an environment (a snapshot, or any [`Env`]) and the home directory
/// whose `.aws/` holds them.
#[derive(Clone)]
pub struct AwsConfig {
    pub env: Arc<dyn Env + Send + Sync>,
    pub home: Option<PathBuf>,
}

impl AwsConfig {
    pub fn new(env: impl Env + Send + Sync + 'static, home: Option<PathBuf>) -> AwsConfig {
        AwsConfig {
            env: Arc::new(env),
            home,
        }
    }

    /// The `AWS_*` variables of `vars` (others, and values that are not
    /// UTF-8, are left out) and `home`. What the binary and the bindings
    /// pass, as the AWS CLI reads them:
    /// `AwsConfig::from_vars(std::env::vars_os(), std::env::var_os("HOME").map(Into::into))`.
    pub fn from_vars(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
        home: Option<PathBuf>,
    ) -> AwsConfig {
        let env: HashMap<String, String> = vars
            .into_iter()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("AWS_"))
            .collect();
        AwsConfig::new(env, home)
    }
}

impl std::fmt::Debug for AwsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsConfig")
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

/// Everything resolved: ready to sign requests.
#[derive(Debug, Clone)]
pub struct Config {
    pub https: bool,
    /// Host (and `:port` when not the scheme's default) of the endpoint.
    pub host: String,
    pub port: u16,
    pub region: String,
    pub virtual_hosted: bool,
    pub creds: Option<Credentials>,
    /// [`S3Options::provider`], asked when `creds` is `None`.
    pub provider: Option<CredentialsProvider>,
    /// What the AWS chain leads to when it is not fixed keys (a
    /// `role_arn` profile, web identity, `credential_process`, container
    /// credentials): followed for the credentials, and again before they
    /// expire, when `creds` and `provider` are `None`.
    pub creds_source: Option<CredentialSource>,
    /// Where the credentials came from, for messages.
    pub creds_from: String,
    /// The AWS variables and files were read ([`S3Options::aws_config`]).
    pub aws_config: bool,
    /// [`S3Options::no_sign_request`]: every request goes unsigned.
    pub no_sign_request: bool,
    /// [`S3Options::anonymous`]: when the chain's last link (EC2 instance
    /// metadata) gives no credentials, requests go unsigned instead of
    /// failing.
    pub anonymous: bool,
    pub ca_bundle: Option<PathBuf>,
    pub threshold: u64,
    pub part_size: u64,
    pub concurrency: usize,
    pub checksum: Checksum,
}

/// Where the AWS variables come from ([`AwsConfig`]; a map in tests).
pub trait Env {
    fn var(&self, k: &str) -> Option<String>;
}

impl Env for HashMap<String, String> {
    fn var(&self, k: &str) -> Option<String> {
        self.get(k).cloned().filter(|v| !v.is_empty())
    }
}

/// An INI file as the AWS tools read it: `[section]` then `key = value`.
/// A key with no value followed by indented `sub = value` lines (the
/// `s3 =` and `[services]` nesting) gives the keys `key.sub`.
pub fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section = String::new();
    // The key with no value that indented lines below belong to.
    let mut parent: Option<String> = None;
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.trim().to_string();
            parent = None;
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            let indented = line.starts_with([' ', '\t']);
            let key = match &parent {
                Some(p) if indented => format!("{p}.{k}"),
                _ => {
                    parent = v.is_empty().then(|| k.clone());
                    k
                }
            };
            out.entry(section.clone()).or_default().insert(key, v);
        }
    }
    out
}

fn read_ini(p: &Path) -> HashMap<String, HashMap<String, String>> {
    std::fs::read_to_string(p)
        .map(|t| parse_ini(&t))
        .unwrap_or_default()
}

/// [`Config::creds_from`] when the keys are [`S3Options::credentials`].
pub const FROM_OPTIONS: &str =
    "S3Options::credentials (s3_access_key_id and s3_secret_access_key by name)";

/// What [`config`] says when no credentials were given.
pub const NO_CREDENTIALS: &str = "S3 needs credentials: give S3Options::credentials (keys) or S3Options::provider, or S3Options::aws_config to read them as the AWS CLI does (AWS_* variables, ~/.aws); S3Options::anonymous sends unsigned requests (public buckets)";

/// The options resolved into a [`Config`]: the AWS variables and files
/// only from [`S3Options::aws_config`], never from the process.
pub fn config(o: &S3Options) -> Result<Config, String> {
    let none: HashMap<String, String> = HashMap::new();
    let c = match &o.aws_config {
        Some(a) => resolve(o, &*a.env, a.home.as_deref())?,
        None => {
            if let Some(p) = &o.profile {
                return Err(format!(
                    "S3 profile {p:?}: profiles are read from the AWS files; set S3Options::aws_config to say where they are"
                ));
            }
            let mut c = resolve(o, &none, None)?;
            // Instance metadata is part of the AWS chain: only with it.
            if matches!(c.creds_source, Some(CredentialSource::Imds(_))) {
                c.creds_source = None;
                c.creds_from = "no credentials".into();
            }
            c
        }
    };
    let some = c.creds.is_some() || c.provider.is_some() || c.creds_source.is_some();
    if !some && !o.anonymous && !o.no_sign_request {
        return Err(NO_CREDENTIALS.to_string());
    }
    Ok(Config {
        aws_config: o.aws_config.is_some(),
        ..c
    })
}

/// Resolve options, environment and the AWS files into a [`Config`], in
/// the AWS CLI's order: flags (and the options' own credentials and
/// provider), then the `AWS_*` keys, then the profile in
/// `~/.aws/credentials` and `~/.aws/config` ([`chain::profile_credentials`]:
/// its `role_arn`, web identity, its keys, its `credential_process`,
/// container credentials).
pub fn resolve(o: &S3Options, env: &dyn Env, home: Option<&Path>) -> Result<Config, String> {
    let profile = o
        .profile
        .clone()
        .or_else(|| env.var("AWS_PROFILE"))
        .unwrap_or_else(|| "default".into());
    let creds_file = env
        .var("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".aws/credentials")));
    let config_file = env
        .var("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".aws/config")));
    let files = chain::AwsFiles {
        credentials: creds_file.as_deref().map(read_ini).unwrap_or_default(),
        config: config_file.as_deref().map(read_ini).unwrap_or_default(),
    };
    if o.profile.is_some() && !files.has_profile(&profile) {
        return Err(format!(
            "--s3-profile {profile}: no such profile in ~/.aws/credentials or ~/.aws/config"
        ));
    }
    let profile_region = env
        .var("AWS_REGION")
        .or_else(|| env.var("AWS_DEFAULT_REGION"))
        .or_else(|| files.config_get(&profile, "region"));
    let region = o
        .region
        .clone()
        .or_else(|| profile_region.clone())
        .unwrap_or_else(|| "us-east-1".into());

    if let Some(c) = &o.credentials {
        if c.access_key.is_empty() || c.secret_key.is_empty() {
            return Err("S3Options::credentials: an access key id and its secret key are both needed (s3_access_key_id and s3_secret_access_key by name)".into());
        }
    }
    // As the AWS CLI's `--profile`: a profile the application names sets
    // the environment's keys and web identity aside (`AWS_PROFILE` does
    // not); `credential_source = Environment` still reads the keys.
    let explicit_profile = o.profile.is_some();
    let env_keys = if explicit_profile {
        (None, None)
    } else {
        (
            env.var("AWS_ACCESS_KEY_ID"),
            env.var("AWS_SECRET_ACCESS_KEY"),
        )
    };
    let (creds, creds_source, creds_from) = match env_keys {
        _ if o.no_sign_request => (
            None,
            None,
            "none: unsigned requests (no_sign_request)".into(),
        ),
        _ if o.credentials.is_some() => (o.credentials.clone(), None, FROM_OPTIONS.into()),
        _ if o.provider.is_some() => (None, None, "the application's credentials provider".into()),
        (Some(a), Some(s)) => (
            Some(Credentials {
                access_key: a,
                secret_key: s,
                session_token: env.var("AWS_SESSION_TOKEN"),
            }),
            None,
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".to_string(),
        ),
        _ => {
            // STS for the profile's roles: in its region (the bucket's
            // region flag is about S3), at its configured endpoint.
            let sts_region = profile_region.unwrap_or_else(|| region.clone());
            let sts = sts::StsEndpoint {
                url: configured_endpoint("STS", "sts", env, &files, &profile)
                    .unwrap_or_else(|| format!("https://sts.{sts_region}.amazonaws.com")),
                region: sts_region,
            };
            let lookup = chain::Lookup {
                files: &files,
                env,
                sts: &sts,
                env_web_identity: !explicit_profile,
                now: std::time::SystemTime::now(),
            };
            match chain::profile_credentials(&lookup, &profile)? {
                Some(CredentialSource::Keys { credentials, from }) => {
                    (Some(credentials), None, from)
                }
                Some(source) => {
                    let from = source.describe();
                    (None, Some(source), from)
                }
                None => (None, None, "no credentials".to_string()),
            }
        }
    };
    let endpoint = o
        .endpoint
        .clone()
        .or_else(|| configured_endpoint("S3", "s3", env, &files, &profile));
    let custom = endpoint.is_some();
    let endpoint = endpoint.unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
    let url = ferry_http::Url::parse(&endpoint).map_err(|e| format!("S3 endpoint: {e}"))?;
    if url.path != "/" && !url.path.is_empty() {
        return Err(format!(
            "S3 endpoint {endpoint}: give the endpoint without a path (https://host[:port])"
        ));
    }
    let checksum = match o.checksum.as_deref().unwrap_or("crc32") {
        "crc32" => Checksum::Crc32,
        "md5" => Checksum::Md5,
        "none" => Checksum::None,
        other => return Err(format!("--s3-checksum {other}: want crc32, md5 or none")),
    };
    let threshold = o
        .multipart_threshold
        .unwrap_or(DEFAULT_THRESHOLD)
        .max(MIN_PART);
    let part_size = o
        .part_size
        .unwrap_or(DEFAULT_PART)
        .clamp(MIN_PART, MAX_PART);
    Ok(Config {
        https: url.https,
        host: url.host,
        port: url.port,
        region,
        // AWS itself wants virtual-hosted buckets; custom endpoints get
        // path-style unless asked (as rclone does for most providers).
        virtual_hosted: o.virtual_hosted || !custom,
        creds,
        provider: o.provider.clone().filter(|_| !o.no_sign_request),
        creds_source,
        creds_from,
        aws_config: true,
        no_sign_request: o.no_sign_request,
        anonymous: o.anonymous,
        ca_bundle: env.var("AWS_CA_BUNDLE").map(PathBuf::from),
        threshold,
        part_size,
        concurrency: o
            .upload_concurrency
            .unwrap_or(DEFAULT_CONCURRENCY)
            .clamp(1, 64),
        checksum,
    })
}

/// `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS`, else the profile's
/// `ignore_configured_endpoint_urls`, is `true`: the configured endpoint
/// URLs are not read ("Service-specific endpoints", AWS SDKs and Tools
/// Reference Guide).
pub fn ignore_configured_endpoints(env: &dyn Env, files: &chain::AwsFiles, profile: &str) -> bool {
    env.var("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
        .or_else(|| files.config_get(profile, "ignore_configured_endpoint_urls"))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// A service's endpoint configured as the AWS CLI reads it ("Service-
/// specific endpoints" in the AWS SDKs and Tools guide): `AWS_ENDPOINT_URL_<SERVICE>`,
/// then `AWS_ENDPOINT_URL`, then the `[services]` section the profile
/// names, then the profile's `endpoint_url`; none of them when
/// [`ignore_configured_endpoints`]. `None`: AWS's own.
fn configured_endpoint(
    env_suffix: &str,
    service: &str,
    env: &dyn Env,
    files: &chain::AwsFiles,
    profile: &str,
) -> Option<String> {
    if ignore_configured_endpoints(env, files, profile) {
        return None;
    }
    env.var(&format!("AWS_ENDPOINT_URL_{env_suffix}"))
        .or_else(|| env.var("AWS_ENDPOINT_URL"))
        .or_else(|| files.service_endpoint(profile, service))
        .or_else(|| files.config_get(profile, "endpoint_url"))
}

impl Config {
    /// The endpoint as a URL prefix, for messages and keys.
    pub fn endpoint(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            format!("{scheme}://{}", self.host)
        } else if self.host.contains(':') {
            format!("{scheme}://[{}]:{}", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }

    /// (host for the URL, path prefix) of a bucket.
    pub fn bucket_base(&self, bucket: &str) -> (String, String) {
        if self.virtual_hosted {
            (format!("{bucket}.{}", self.host), String::new())
        } else {
            (
                self.host.clone(),
                format!("/{}", sigv4::uri_encode(bucket.as_bytes())),
            )
        }
    }
}

/// Part size for an object of `size` bytes: the wanted size, raised (to
/// whole MiB) until the object fits in 10,000 parts.
pub fn part_size_for(size: u64, wanted: u64) -> u64 {
    let need = size.div_ceil(MAX_PARTS);
    let need = need.div_ceil(1 << 20) << 20;
    wanted.max(need).clamp(MIN_PART, MAX_PART)
}

/// What went wrong with a request, for a message and a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Wrong or missing credentials, refused access: exit 3.
    Auth,
    /// Try again later (500, 503 SlowDown): retried.
    Transient,
    /// About the object or bucket: exit 4.
    Remote,
    /// A local setting must change (the clock).
    Usage,
}

/// The store's answer says the credentials (their session token) have
/// expired and should be fetched again: `ExpiredToken` ("The provided
/// token has expired", HTTP 400) and `TokenRefreshRequired` ("The
/// provided token must be refreshed", 400) in S3's list of error codes.
/// Not `RequestExpired` (a request signed too long ago, or a clock that
/// is off) nor `InvalidToken` (a malformed token): new keys cure neither.
pub fn expired_credentials(code: &str) -> bool {
    matches!(code, "ExpiredToken" | "TokenRefreshRequired")
}

/// Classify an S3 error and say what to do.
pub fn explain(status: u16, code: &str, endpoint: &str, bucket: &str) -> (ErrorClass, String) {
    match code {
        "ExpiredToken" | "TokenRefreshRequired" => (
            ErrorClass::Auth,
            format!("the credentials have expired; {endpoint} wants new ones"),
        ),
        "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken"
        // versitygw's answer (HTTP 404!) to an unknown access key.
        | "XAdminUserNotFound" => (
            ErrorClass::Auth,
            format!("the store at {endpoint} refused the credentials; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE and ~/.aws/credentials)"),
        ),
        "AccessDenied" | "AllAccessDisabled" => (
            ErrorClass::Auth,
            format!("access denied by {endpoint}; the credentials lack permission for bucket {bucket}"),
        ),
        "RequestTimeTooSkewed" => (
            ErrorClass::Usage,
            "this machine's clock differs from the store's by more than 15 minutes (S3 refuses such signatures); set the clock (timedatectl set-ntp true)".to_string(),
        ),
        "NoSuchBucket" => (
            ErrorClass::Remote,
            format!("no bucket {bucket:?} at {endpoint}; create it first (aws s3 mb s3://{bucket}) or check --s3-endpoint, --s3-region and the bucket name"),
        ),
        "AuthorizationHeaderMalformed" | "PermanentRedirect" | "IllegalLocationConstraintException" => (
            ErrorClass::Usage,
            format!("bucket {bucket} is in another region or behind another endpoint than {endpoint}; give --s3-region or --s3-endpoint"),
        ),
        "SlowDown" | "InternalError" | "ServiceUnavailable" | "RequestTimeout" => (
            ErrorClass::Transient,
            "the store asks to slow down or failed for now; ferry retries with backoff".to_string(),
        ),
        "NoSuchUpload" => (
            ErrorClass::Remote,
            "the multipart upload is gone (aborted, or completed elsewhere)".to_string(),
        ),
        _ => match status {
            401 | 403 => (
                ErrorClass::Auth,
                format!("access denied by {endpoint}; check the credentials and that they may use bucket {bucket}"),
            ),
            500 | 502 | 503 | 504 => (
                ErrorClass::Transient,
                "the store failed for now; ferry retries with backoff".to_string(),
            ),
            _ => (ErrorClass::Remote, String::new()),
        },
    }
}

/// The object's CRC32 of its whole content, from a HEAD or GET sent with
/// `x-amz-checksum-mode: ENABLED`: `x-amz-checksum-crc32` (base64 of the
/// big-endian value) when it is a full-object checksum. A multipart
/// object uploaded as COMPOSITE (the default before FULL_OBJECT existed,
/// and what many tools still send) keeps a CRC32 of its parts' CRC32s,
/// written `VALUE-N`: no local file hashes to that without knowing the
/// part sizes, so it counts as no checksum.
pub fn full_object_crc32(value: Option<&str>, kind: Option<&str>) -> Option<[u8; 4]> {
    use base64::Engine as _;
    let v = value?.trim();
    if v.contains('-') || kind.is_some_and(|k| k.trim().eq_ignore_ascii_case("COMPOSITE")) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(v).ok()?;
    bytes.try_into().ok()
}

/// A COMPOSITE multipart object's CRC32, `VALUE-N`: the CRC32 of its N
/// parts' CRC32s (each 4 bytes, big-endian, in part order), and N. What
/// the AWS CLI and SDKs kept before FULL_OBJECT, and other tools still do.
pub fn composite_crc32(value: Option<&str>) -> Option<([u8; 4], u64)> {
    use base64::Engine as _;
    let (v, n) = value?.trim().split_once('-')?;
    let n: u64 = n.parse().ok().filter(|n| (1..=MAX_PARTS).contains(n))?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(v).ok()?;
    Some((bytes.try_into().ok()?, n))
}

/// The composite CRC32 of parts whose own CRC32s are `parts`.
pub fn composite_of(parts: &[u32]) -> [u8; 4] {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(&p.to_be_bytes());
    }
    h.finalize().to_be_bytes()
}

/// Header names of S3's flexible checksums.
pub const CHECKSUM_MODE: &str = "x-amz-checksum-mode";
pub const CHECKSUM_CRC32: &str = "x-amz-checksum-crc32";
pub const CHECKSUM_TYPE: &str = "x-amz-checksum-type";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    /// An environment snapshot of these variables.
    pub(crate) fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn part_sizes_fit_ten_thousand_parts() {
        assert_eq!(part_size_for(1 << 30, DEFAULT_PART), DEFAULT_PART);
        let five_tib = 5u64 << 40;
        let p = part_size_for(five_tib, DEFAULT_PART);
        assert!(five_tib.div_ceil(p) <= MAX_PARTS, "{p}");
        assert_eq!(p % (1 << 20), 0);
        assert_eq!(part_size_for(10, 1), MIN_PART);
    }

    #[test]
    fn chain_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(
            dir.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n[other]\naws_access_key_id=O\naws_secret_access_key=o\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".aws/config"),
            "[default]\nregion = eu-west-3\n[profile other]\nregion = ap-south-1\nendpoint_url = http://127.0.0.1:9000\n",
        )
        .unwrap();
        let o = S3Options::default();
        let c = resolve(&o, &env(&[]), Some(dir.path())).unwrap();
        assert_eq!(c.creds.as_ref().unwrap().access_key, "FILEKEY");
        assert_eq!(c.region, "eu-west-3");
        assert_eq!(c.host, "s3.eu-west-3.amazonaws.com");
        assert!(c.virtual_hosted && c.https);
        let c = resolve(&o, &env(&[("AWS_PROFILE", "other")]), Some(dir.path())).unwrap();
        assert_eq!(c.creds.as_ref().unwrap().access_key, "O");
        assert_eq!(
            (c.host.as_str(), c.port, c.https),
            ("127.0.0.1", 9000, false)
        );
        assert!(!c.virtual_hosted, "custom endpoints are path-style");
        let c = resolve(
            &o,
            &env(&[
                ("AWS_ACCESS_KEY_ID", "E"),
                ("AWS_SECRET_ACCESS_KEY", "e"),
                ("AWS_REGION", "x-1"),
            ]),
            Some(dir.path()),
        )
        .unwrap();
        assert_eq!(c.creds.as_ref().unwrap().access_key, "E");
        assert_eq!(c.region, "x-1");
        let flags = S3Options {
            endpoint: Some("https://minio.local:9443".into()),
            region: Some("r".into()),
            virtual_hosted: true,
            ..S3Options::default()
        };
        let c = resolve(&flags, &env(&[("AWS_ENDPOINT_URL", "http://x")]), None).unwrap();
        assert_eq!(c.endpoint(), "https://minio.local:9443");
        assert_eq!(c.bucket_base("b").0, "b.minio.local");
        assert!(resolve(
            &S3Options {
                profile: Some("nope".into()),
                ..S3Options::default()
            },
            &env(&[]),
            Some(dir.path())
        )
        .is_err());
    }

    #[test]
    fn nested_ini_keys() {
        let ini = parse_ini(
            "[services local]\nsts =\n  endpoint_url = http://127.0.0.1:1\ns3 =\n\tendpoint_url = http://s3\nplain = v\n  stray = x\n[profile p]\nregion = r\n",
        );
        let s = &ini["services local"];
        assert_eq!(s["sts.endpoint_url"], "http://127.0.0.1:1");
        assert_eq!(s["s3.endpoint_url"], "http://s3");
        assert_eq!(s["plain"], "v");
        // Indented under a key that has a value: a key of its own.
        assert_eq!(s["stray"], "x");
        assert_eq!(ini["profile p"]["region"], "r");
    }

    #[test]
    fn sts_endpoint_as_the_aws_cli_picks_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(
            dir.path().join(".aws/credentials"),
            "[base]\naws_access_key_id = B\naws_secret_access_key = b\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".aws/config"),
            "[profile dev]\nrole_arn = arn:r\nsource_profile = base\nregion = eu-west-3\n\
             [profile svc]\nrole_arn = arn:r\nsource_profile = base\nservices = local\nendpoint_url = http://profile:1\n\
             [profile ep]\nrole_arn = arn:r\nsource_profile = base\nendpoint_url = http://profile:1\n\
             [services local]\nsts =\n  endpoint_url = http://sts-section:1\ns3 =\n  endpoint_url = http://s3-section:1\n",
        )
        .unwrap();
        let sts_of = |profile: &str, vars: &[(&str, &str)], o: S3Options| {
            let mut e = env(vars);
            e.insert("AWS_PROFILE".into(), profile.into());
            let c = resolve(&o, &e, Some(dir.path())).unwrap();
            let s3 = c.endpoint();
            match c.creds_source {
                Some(CredentialSource::AssumeRole(r)) => {
                    (r.sts.url.clone(), r.sts.region.clone(), s3)
                }
                other => panic!("{other:?}"),
            }
        };
        let d = S3Options::default;
        // The profile's region, AWS's regional endpoint; --s3-region is the bucket's.
        let flag = S3Options {
            region: Some("ap-south-1".into()),
            ..d()
        };
        assert_eq!(
            sts_of("dev", &[], flag),
            (
                "https://sts.eu-west-3.amazonaws.com".into(),
                "eu-west-3".into(),
                "https://s3.ap-south-1.amazonaws.com".into()
            )
        );
        assert_eq!(
            sts_of("dev", &[("AWS_REGION", "us-west-2")], d()).0,
            "https://sts.us-west-2.amazonaws.com"
        );
        // services section, then the profile's endpoint_url.
        let (sts, _, s3) = sts_of("svc", &[], d());
        assert_eq!(
            (sts.as_str(), s3.as_str()),
            ("http://sts-section:1", "http://s3-section:1")
        );
        assert_eq!(sts_of("ep", &[], d()).0, "http://profile:1");
        // AWS_ENDPOINT_URL before the files, AWS_ENDPOINT_URL_STS before all.
        assert_eq!(
            sts_of("svc", &[("AWS_ENDPOINT_URL", "http://global:1")], d()).0,
            "http://global:1"
        );
        let (sts, _, s3) = sts_of(
            "svc",
            &[
                ("AWS_ENDPOINT_URL", "http://global:1"),
                ("AWS_ENDPOINT_URL_STS", "http://sts-env:1"),
            ],
            d(),
        );
        assert_eq!(
            (sts.as_str(), s3.as_str()),
            ("http://sts-env:1", "http://global:1")
        );
        // AWS_IGNORE_CONFIGURED_ENDPOINT_URLS (or the profile's
        // ignore_configured_endpoint_urls): AWS's own endpoints, for both;
        // an explicit endpoint (--s3-endpoint) still counts.
        let all = [
            ("AWS_ENDPOINT_URL", "http://global:1"),
            ("AWS_ENDPOINT_URL_STS", "http://sts-env:1"),
            ("AWS_ENDPOINT_URL_S3", "http://s3-env:1"),
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
        ];
        let (sts, _, s3) = sts_of("svc", &all, d());
        assert_eq!(
            (sts.as_str(), s3.as_str()),
            (
                "https://sts.us-east-1.amazonaws.com",
                "https://s3.us-east-1.amazonaws.com"
            )
        );
        let flag = S3Options {
            endpoint: Some("http://flag:1".into()),
            ..d()
        };
        let (sts, _, s3) = sts_of("svc", &all, flag);
        assert_eq!(
            (sts.as_str(), s3.as_str()),
            ("https://sts.us-east-1.amazonaws.com", "http://flag:1")
        );
        std::fs::write(
            dir.path().join(".aws/config"),
            "[profile ign]\nrole_arn = arn:r\nsource_profile = base\nendpoint_url = http://profile:1\nignore_configured_endpoint_urls = true\nregion = eu-west-3\n",
        )
        .unwrap();
        assert_eq!(
            sts_of("ign", &[("AWS_ENDPOINT_URL", "http://global:1")], d()).0,
            "https://sts.eu-west-3.amazonaws.com"
        );
        // The environment's false beats the profile's true.
        assert_eq!(
            sts_of(
                "ign",
                &[("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "false")],
                d()
            )
            .0,
            "http://profile:1"
        );
        std::fs::write(
            dir.path().join(".aws/config"),
            "[profile dev]\nrole_arn = arn:r\nsource_profile = base\nregion = eu-west-3\n",
        )
        .unwrap();
        // The environment's keys come before any role.
        let mut e = env(&[("AWS_ACCESS_KEY_ID", "E"), ("AWS_SECRET_ACCESS_KEY", "e")]);
        e.insert("AWS_PROFILE".into(), "dev".into());
        let c = resolve(&d(), &e, Some(dir.path())).unwrap();
        assert!(c.creds_source.is_none() && c.creds.unwrap().access_key == "E");
        // ... unless the profile is named explicitly (the AWS CLI's
        // --profile): then the environment's keys and web identity are set
        // aside.
        e.insert("AWS_WEB_IDENTITY_TOKEN_FILE".into(), "/t".into());
        e.insert("AWS_ROLE_ARN".into(), "arn:w".into());
        let named = |p: &str| S3Options {
            profile: Some(p.into()),
            ..d()
        };
        let c = resolve(&named("dev"), &e, Some(dir.path())).unwrap();
        assert!(matches!(
            c.creds_source,
            Some(CredentialSource::AssumeRole(_))
        ));
        let c = resolve(&named("base"), &e, Some(dir.path())).unwrap();
        assert_eq!(c.creds.unwrap().access_key, "B");
        let c = resolve(&d(), &e, Some(dir.path())).unwrap();
        assert_eq!(c.creds.unwrap().access_key, "E");
        // A broken role profile is a usage error when it is used.
        std::fs::write(
            dir.path().join(".aws/config"),
            "[default]\nrole_arn = arn:r\n",
        )
        .unwrap();
        let e = config(&S3Options {
            aws_config: Some(AwsConfig::new(env(&[]), Some(dir.path().to_path_buf()))),
            ..d()
        })
        .unwrap_err();
        assert!(e.contains("source_profile"), "{e}");
    }

    #[test]
    fn credential_process_in_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(
            dir.path().join(".aws/credentials"),
            "[both]\naws_access_key_id = K\naws_secret_access_key = s\n[increds]\ncredential_process = /bin/c1 x\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".aws/config"),
            "[default]\ncredential_process = /bin/c0\n[profile both]\ncredential_process = /bin/c2\n[profile increds]\nregion = r\n",
        )
        .unwrap();
        let o = S3Options::default();
        let c = resolve(&o, &env(&[]), Some(dir.path())).unwrap();
        assert!(c.creds.is_none());
        assert_eq!(
            c.creds_source,
            Some(CredentialSource::Process(CredentialProcess {
                profile: "default".into(),
                command: "/bin/c0".into()
            }))
        );
        assert!(c.creds_from.contains("credential_process") && c.creds_from.contains("/bin/c0"));
        // Also read from ~/.aws/credentials, as the AWS CLI does.
        let c = resolve(&o, &env(&[("AWS_PROFILE", "increds")]), Some(dir.path())).unwrap();
        assert!(
            matches!(c.creds_source, Some(CredentialSource::Process(p)) if p.command == "/bin/c1 x")
        );
        // Keys in the same profile come first.
        let c = resolve(&o, &env(&[("AWS_PROFILE", "both")]), Some(dir.path())).unwrap();
        assert_eq!(c.creds.unwrap().access_key, "K");
        assert!(c.creds_source.is_none());
        // And the environment before any profile.
        let c = resolve(
            &o,
            &env(&[("AWS_ACCESS_KEY_ID", "E"), ("AWS_SECRET_ACCESS_KEY", "e")]),
            Some(dir.path()),
        )
        .unwrap();
        assert_eq!(c.creds.unwrap().access_key, "E");
        assert!(c.creds_source.is_none());
    }

    #[test]
    fn instance_metadata_only_through_aws_config() {
        let dir = tempfile::tempdir().unwrap();
        let with = |vars: &[(&str, &str)]| {
            config(&S3Options {
                aws_config: Some(AwsConfig::new(env(vars), Some(dir.path().into()))),
                ..S3Options::default()
            })
        };
        // Nothing else: IMDS, the last link, asked when the backend opens.
        let c = with(&[]).unwrap();
        assert!(
            matches!(&c.creds_source, Some(CredentialSource::Imds(i)) if i.last_link),
            "{c:?}"
        );
        // Turned off: no credentials, as before.
        let e = with(&[("AWS_EC2_METADATA_DISABLED", "true")]).unwrap_err();
        assert_eq!(e, NO_CREDENTIALS);
        // Without aws_config, never.
        let c = config(&S3Options {
            anonymous: true,
            ..S3Options::default()
        })
        .unwrap();
        assert!(c.creds_source.is_none() && c.creds_from == "no credentials");
    }

    #[test]
    fn nothing_from_the_process_unless_given() {
        // No credentials, no AWS config: refused, saying how to give them.
        let e = config(&S3Options::default()).unwrap_err();
        assert!(
            e.contains("S3Options::credentials") && e.contains("aws_config"),
            "{e}"
        );
        let c = config(&S3Options {
            anonymous: true,
            ..S3Options::default()
        })
        .unwrap();
        assert!(c.creds.is_none() && !c.aws_config);
        assert_eq!(c.host, "s3.us-east-1.amazonaws.com");
        // A profile lives in the AWS files: it needs aws_config.
        assert!(config(&S3Options {
            profile: Some("p".into()),
            credentials: Some(Credentials::new("A", "s")),
            ..S3Options::default()
        })
        .unwrap_err()
        .contains("aws_config"));
        // Keys in the options, with nothing else.
        let c = config(&S3Options {
            credentials: Some(Credentials::new("A", "s").with_session_token("t")),
            endpoint: Some("http://127.0.0.1:9000".into()),
            ..S3Options::default()
        })
        .unwrap();
        assert_eq!(
            c.creds.as_ref().unwrap().session_token.as_deref(),
            Some("t")
        );
        assert_eq!(c.creds_from, FROM_OPTIONS);
        assert!(c.ca_bundle.is_none());
    }

    #[test]
    fn options_credentials_come_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(
            dir.path().join(".aws/config"),
            "[default]\nregion = eu-west-3\ncredential_process = /bin/c0\n",
        )
        .unwrap();
        let env = AwsConfig::from_vars(
            [
                ("AWS_ACCESS_KEY_ID".into(), "E".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "e".into()),
                ("AWS_CA_BUNDLE".into(), "/ca.pem".into()),
                ("PATH".into(), "/bin".into()),
            ],
            Some(dir.path().to_path_buf()),
        );
        assert_eq!(env.env.var("PATH"), None, "only AWS_* variables are kept");
        let aws = |o: S3Options| S3Options {
            aws_config: Some(env.clone()),
            ..o
        };
        let c = config(&aws(S3Options::default())).unwrap();
        assert_eq!(c.creds.unwrap().access_key, "E");
        assert_eq!(c.region, "eu-west-3");
        assert_eq!(c.ca_bundle, Some(PathBuf::from("/ca.pem")));
        assert!(c.aws_config);
        let c = config(&aws(S3Options {
            credentials: Some(Credentials::new("O", "o")),
            ..S3Options::default()
        }))
        .unwrap();
        assert_eq!(c.creds.unwrap().access_key, "O");
        let p = CredentialsProvider::blocking(|| Err("unused".into()));
        let c = config(&aws(S3Options {
            provider: Some(p),
            ..S3Options::default()
        }))
        .unwrap();
        assert!(c.creds.is_none() && c.creds_source.is_none() && c.provider.is_some());
        assert_eq!(c.creds_from, "the application's credentials provider");
    }

    #[test]
    fn expired_credentials_codes() {
        assert!(expired_credentials("ExpiredToken"));
        assert!(expired_credentials("TokenRefreshRequired"));
        for other in ["RequestExpired", "InvalidToken", "AccessDenied", ""] {
            assert!(!expired_credentials(other), "{other}");
        }
        let (c, m) = explain(400, "ExpiredToken", "http://h", "b");
        assert_eq!(c, ErrorClass::Auth);
        assert!(m.contains("expired"), "{m}");
    }

    #[test]
    fn errors_say_what_to_do() {
        let (c, m) = explain(403, "InvalidAccessKeyId", "http://h", "b");
        assert_eq!(c, ErrorClass::Auth);
        assert!(m.contains("AWS_ACCESS_KEY_ID"));
        assert_eq!(explain(503, "SlowDown", "e", "b").0, ErrorClass::Transient);
        assert!(explain(403, "RequestTimeTooSkewed", "e", "b")
            .1
            .contains("clock"));
        assert!(explain(404, "NoSuchBucket", "e", "b")
            .1
            .contains("create it"));
    }

    #[test]
    fn composite_checksums() {
        // "hello" in two parts: CRC32 of the two CRC32s.
        let (a, b) = (crc32fast::hash(b"hel"), crc32fast::hash(b"lo"));
        let mut cat = a.to_be_bytes().to_vec();
        cat.extend_from_slice(&b.to_be_bytes());
        let want = crc32fast::hash(&cat).to_be_bytes();
        assert_eq!(composite_of(&[a, b]), want);
        use base64::Engine as _;
        let v = format!(
            "{}-2",
            base64::engine::general_purpose::STANDARD.encode(want)
        );
        assert_eq!(composite_crc32(Some(&v)), Some((want, 2)));
        assert_eq!(full_object_crc32(Some(&v), Some("COMPOSITE")), None);
        assert_eq!(composite_crc32(Some("NhCmhg==")), None);
        assert_eq!(composite_crc32(Some("NhCmhg==-0")), None);
        assert_eq!(composite_crc32(Some("NhCmhg==-10001")), None);
        assert_eq!(composite_crc32(Some("%%-2")), None);
        assert_eq!(composite_crc32(None), None);
    }

    #[test]
    fn full_object_crc32_only() {
        // CRC32 of "hello" is 0x3610a686.
        assert_eq!(
            full_object_crc32(Some("NhCmhg=="), None),
            Some([0x36, 0x10, 0xa6, 0x86])
        );
        assert_eq!(
            full_object_crc32(Some("NhCmhg=="), Some("FULL_OBJECT")),
            Some([0x36, 0x10, 0xa6, 0x86])
        );
        // A checksum of part checksums: not the content's.
        assert_eq!(full_object_crc32(Some("NhCmhg==-3"), None), None);
        assert_eq!(full_object_crc32(Some("NhCmhg=="), Some("COMPOSITE")), None);
        // Not base64, or not 4 bytes: none.
        assert_eq!(full_object_crc32(Some("%%%"), None), None);
        assert_eq!(full_object_crc32(Some("AAAAAAAA"), None), None);
        assert_eq!(full_object_crc32(None, None), None);
    }
}
