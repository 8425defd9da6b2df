//! The AWS CLI's credential sources beyond fixed keys, resolved from the
//! AWS files and an [`Env`] without I/O besides having read the files:
//! `role_arn` profiles (AssumeRole, chained through `source_profile` or
//! `credential_source`), web identity (a profile's
//! `web_identity_token_file`, or `AWS_WEB_IDENTITY_TOKEN_FILE` and
//! `AWS_ROLE_ARN`), `credential_process`, container credentials
//! (`AWS_CONTAINER_CREDENTIALS_*`) and EC2 instance metadata (IMDS, the
//! last link; [`super::imds`]). What is resolved is a
//! [`CredentialSource`]: a recipe `backend::s3_creds` follows each time
//! the keys are due (docs/internals/s3.md, "Credentials").
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::SystemTime;

use super::imds::{self, Imds};
use super::process::{parse_expiration, CredentialProcess};
use super::sts::{default_session_name, RoleRequest, StsEndpoint};
use super::{Credentials, Env, ExpiringCredentials};

/// One INI file: section name to its keys (lower case).
pub type Ini = HashMap<String, HashMap<String, String>>;

/// `~/.aws/credentials` and `~/.aws/config`, read.
#[derive(Debug, Default)]
pub struct AwsFiles {
    pub credentials: Ini,
    pub config: Ini,
}

impl AwsFiles {
    fn config_section(&self, profile: &str) -> Option<&HashMap<String, String>> {
        if profile == "default" {
            self.config.get("default")
        } else {
            self.config.get(&format!("profile {profile}"))
        }
    }

    /// The profile is in one of the files.
    pub fn has_profile(&self, profile: &str) -> bool {
        self.credentials.contains_key(profile) || self.config_section(profile).is_some()
    }

    /// A profile's setting: the credentials file first, then the config
    /// file, as the AWS CLI merges them. Empty values count as unset.
    pub fn get(&self, profile: &str, key: &str) -> Option<String> {
        self.credentials
            .get(profile)
            .and_then(|s| s.get(key))
            .or_else(|| self.config_section(profile).and_then(|s| s.get(key)))
            .filter(|v| !v.is_empty())
            .cloned()
    }

    /// A setting only the config file holds (`region`, `endpoint_url`).
    pub fn config_get(&self, profile: &str, key: &str) -> Option<String> {
        self.config_section(profile)
            .and_then(|s| s.get(key))
            .filter(|v| !v.is_empty())
            .cloned()
    }

    /// `endpoint_url` of `service` in the `[services NAME]` section the
    /// profile names (`services = NAME`): `SERVICE =` then indented
    /// `endpoint_url = ...`.
    pub fn service_endpoint(&self, profile: &str, service: &str) -> Option<String> {
        let name = self.config_get(profile, "services")?;
        self.config
            .get(&format!("services {name}"))?
            .get(&format!("{service}.endpoint_url"))
            .filter(|v| !v.is_empty())
            .cloned()
    }

    fn keys(&self, profile: &str) -> Option<Credentials> {
        Some(Credentials {
            access_key: self.get(profile, "aws_access_key_id")?,
            secret_key: self.get(profile, "aws_secret_access_key")?,
            session_token: self.get(profile, "aws_session_token"),
        })
    }
}

/// Where keys come from when they must be fetched (and fetched again
/// before they expire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// Fixed keys: a source profile's, or the environment's for
    /// `credential_source = Environment`.
    Keys {
        credentials: Credentials,
        from: String,
    },
    /// A profile's `credential_process`.
    Process(CredentialProcess),
    /// `AssumeRole`, signed with what `source` gives.
    AssumeRole(Box<AssumeRole>),
    /// `AssumeRoleWithWebIdentity` with the token in a file (read again
    /// at each call: the platform rotates it).
    WebIdentity(WebIdentity),
    /// The ECS / EKS container credentials endpoint.
    Container(ContainerEndpoint),
    /// EC2 instance metadata: the instance profile's role (IMDSv2).
    Imds(Imds),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRole {
    /// The profile whose `role_arn` this is.
    pub profile: String,
    pub request: RoleRequest,
    pub sts: StsEndpoint,
    pub source: CredentialSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentity {
    /// The profile that names the token file, `None`: the environment.
    pub profile: Option<String>,
    pub request: RoleRequest,
    pub token_file: PathBuf,
    pub sts: StsEndpoint,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEndpoint {
    pub url: String,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`: read at each call (EKS
    /// rotates it); comes before `auth_token`.
    pub auth_token_file: Option<PathBuf>,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
    pub auth_token: Option<String>,
}

impl CredentialSource {
    /// Where the keys come from, for messages (no secrets).
    pub fn describe(&self) -> String {
        match self {
            CredentialSource::Keys { from, .. } => from.clone(),
            CredentialSource::Process(p) => format!(
                "credential_process of profile {:?} ({})",
                p.profile, p.command
            ),
            CredentialSource::AssumeRole(r) => format!(
                "role {} of profile {:?} (AssumeRole at {}, with {})",
                r.request.role_arn,
                r.profile,
                r.sts.url,
                r.source.describe()
            ),
            CredentialSource::WebIdentity(w) => format!(
                "role {} with the web identity token {} ({}; AssumeRoleWithWebIdentity at {})",
                w.request.role_arn,
                w.token_file.display(),
                match &w.profile {
                    Some(p) => format!("profile {p:?}"),
                    None => "AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN".into(),
                },
                w.sts.url
            ),
            CredentialSource::Container(c) => {
                format!("the container credentials endpoint {}", c.url)
            }
            CredentialSource::Imds(i) => {
                format!("EC2 instance metadata (IMDS) at {}", i.endpoint)
            }
        }
    }
}

/// Where a profile's credentials are looked up.
pub struct Lookup<'a> {
    pub files: &'a AwsFiles,
    pub env: &'a dyn Env,
    /// Where the roles are assumed.
    pub sts: &'a StsEndpoint,
    /// Read `AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN` and
    /// `AWS_ROLE_SESSION_NAME`; not when the profile was named explicitly
    /// (the AWS CLI's `--profile`, ferry's `--s3-profile`).
    pub env_web_identity: bool,
    /// For default session names.
    pub now: SystemTime,
}

impl Lookup<'_> {
    fn env_var(&self, k: &str) -> Option<String> {
        self.env_web_identity.then(|| self.env.var(k)).flatten()
    }
}

/// The credentials of the profile `profile` once no keys were given and
/// the environment holds none, in the AWS CLI's order ("Authentication
/// and access credentials for the AWS CLI", "Configuration and
/// credential precedence"): assume role (the profile's `role_arn`), web
/// identity, the profile's keys, its `credential_process`, container
/// credentials, EC2 instance metadata (unless `AWS_EC2_METADATA_DISABLED`;
/// only known to hold nothing once asked). `None`: none of these.
pub fn profile_credentials(
    r: &Lookup<'_>,
    profile: &str,
) -> Result<Option<CredentialSource>, String> {
    let (files, env, sts, now) = (r.files, r.env, r.sts, r.now);
    let web_file = files.get(profile, "web_identity_token_file");
    if files.get(profile, "role_arn").is_some() && web_file.is_none() {
        return r
            .assume_role(profile, &mut vec![profile.to_string()])
            .map(Some);
    }
    // The environment's settings come before the profile's, one by one
    // (as botocore reads them).
    let env_file = r.env_var("AWS_WEB_IDENTITY_TOKEN_FILE");
    if let Some(token_file) = env_file.clone().or(web_file) {
        let role_arn = r
            .env_var("AWS_ROLE_ARN")
            .or_else(|| files.get(profile, "role_arn"));
        let Some(role_arn) = role_arn else {
            return Err(format!(
                "web identity token file {token_file}: no role to assume; set AWS_ROLE_ARN (or role_arn in profile {profile:?})"
            ));
        };
        let session_name = r
            .env_var("AWS_ROLE_SESSION_NAME")
            .or_else(|| files.get(profile, "role_session_name"))
            .unwrap_or_else(|| default_session_name(now));
        return Ok(Some(CredentialSource::WebIdentity(WebIdentity {
            profile: env_file.is_none().then(|| profile.to_string()),
            request: RoleRequest {
                role_arn,
                session_name,
                external_id: None,
                duration_seconds: r.duration(profile)?,
            },
            token_file: PathBuf::from(token_file),
            sts: sts.clone(),
        })));
    }
    if let Some(credentials) = files.keys(profile) {
        return Ok(Some(CredentialSource::Keys {
            credentials,
            from: format!("profile {profile:?} in ~/.aws/credentials or ~/.aws/config"),
        }));
    }
    if let Some(p) = r.process(profile) {
        return Ok(Some(p));
    }
    if let Some(c) = container_endpoint(env)? {
        return Ok(Some(CredentialSource::Container(c)));
    }
    Ok(imds::settings(env, files, profile, true)?.map(CredentialSource::Imds))
}

impl Lookup<'_> {
    fn process(&self, profile: &str) -> Option<CredentialSource> {
        let command = self.files.get(profile, "credential_process")?;
        (!command.trim().is_empty()).then(|| {
            CredentialSource::Process(CredentialProcess {
                profile: profile.to_string(),
                command,
            })
        })
    }

    fn duration(&self, profile: &str) -> Result<Option<u32>, String> {
        match self.files.get(profile, "duration_seconds") {
            None => Ok(None),
            Some(d) => d.trim().parse().map(Some).map_err(|_| {
                format!("profile {profile:?}: duration_seconds = {d:?} is not a number of seconds (900 to 43200)")
            }),
        }
    }

    /// The profile's `role_arn`, assumed with its source's credentials.
    /// `chain`: the profiles followed so far, this one last.
    fn assume_role(
        &self,
        profile: &str,
        chain: &mut Vec<String>,
    ) -> Result<CredentialSource, String> {
        let f = self.files;
        let role_arn = f.get(profile, "role_arn").unwrap_or_default();
        if let Some(mfa) = f.get(profile, "mfa_serial") {
            return Err(format!(
                "profile {profile:?} assumes role {role_arn} with an MFA code (mfa_serial = {mfa}), and ferry cannot ask for one; get temporary keys first (aws sts assume-role --serial-number {mfa} --token-code CODE, or the AWS CLI's cache) and give them as AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or use a profile without mfa_serial"
            ));
        }
        let source = match (
            f.get(profile, "source_profile"),
            f.get(profile, "credential_source"),
        ) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "profile {profile:?} has both source_profile and credential_source; keep one"
                ))
            }
            (None, None) => {
                return Err(format!(
                    "profile {profile:?} has role_arn {role_arn} but neither source_profile nor credential_source to assume it with"
                ))
            }
            (Some(src), None) if src == profile => {
                // A profile that names itself assumes its role with its
                // own keys (as the AWS CLI allows).
                let credentials = f.keys(profile).ok_or_else(|| {
                    format!("profile {profile:?} is its own source_profile but has no aws_access_key_id and aws_secret_access_key")
                })?;
                CredentialSource::Keys {
                    credentials,
                    from: format!("the keys of profile {profile:?}"),
                }
            }
            (Some(src), None) => self.source_profile(&src, profile, chain)?,
            (None, Some(cs)) => self.credential_source(&cs, profile)?,
        };
        let session_name = f
            .get(profile, "role_session_name")
            .unwrap_or_else(|| default_session_name(self.now));
        Ok(CredentialSource::AssumeRole(Box::new(AssumeRole {
            profile: profile.to_string(),
            request: RoleRequest {
                role_arn,
                session_name,
                external_id: f.get(profile, "external_id"),
                duration_seconds: self.duration(profile)?,
            },
            sts: self.sts.clone(),
            source,
        })))
    }

    /// The credentials of `name`, the `source_profile` of `parent`.
    fn source_profile(
        &self,
        name: &str,
        parent: &str,
        chain: &mut Vec<String>,
    ) -> Result<CredentialSource, String> {
        let f = self.files;
        if chain.iter().any(|p| p == name) {
            chain.push(name.to_string());
            return Err(format!(
                "the profiles' source_profile settings loop: {}; one of them must have keys, a credential_process or a credential_source",
                chain.join(" -> ")
            ));
        }
        if !f.has_profile(name) {
            return Err(format!(
                "profile {parent:?}: its source_profile {name:?} is in neither ~/.aws/credentials nor ~/.aws/config"
            ));
        }
        chain.push(name.to_string());
        if f.get(name, "role_arn").is_some() && f.get(name, "web_identity_token_file").is_none() {
            return self.assume_role(name, chain);
        }
        if let Some(token_file) = f.get(name, "web_identity_token_file") {
            let role_arn = f.get(name, "role_arn").ok_or_else(|| {
                format!("profile {name:?} has web_identity_token_file but no role_arn")
            })?;
            return Ok(CredentialSource::WebIdentity(WebIdentity {
                profile: Some(name.to_string()),
                request: RoleRequest {
                    role_arn,
                    session_name: f
                        .get(name, "role_session_name")
                        .unwrap_or_else(|| default_session_name(self.now)),
                    external_id: None,
                    duration_seconds: self.duration(name)?,
                },
                token_file: PathBuf::from(token_file),
                sts: self.sts.clone(),
            }));
        }
        if let Some(credentials) = f.keys(name) {
            return Ok(CredentialSource::Keys {
                credentials,
                from: format!("the keys of profile {name:?}"),
            });
        }
        self.process(name).ok_or_else(|| {
            format!(
                "profile {name:?}, the source_profile of {parent:?}, has no credentials: give it aws_access_key_id and aws_secret_access_key, a credential_process, or a role_arn of its own"
            )
        })
    }

    /// `credential_source = Environment | EcsContainer | Ec2InstanceMetadata`.
    fn credential_source(&self, cs: &str, profile: &str) -> Result<CredentialSource, String> {
        match cs {
            "Environment" => {
                let (Some(a), Some(s)) = (
                    self.env.var("AWS_ACCESS_KEY_ID"),
                    self.env.var("AWS_SECRET_ACCESS_KEY"),
                ) else {
                    return Err(format!(
                        "profile {profile:?} has credential_source = Environment, but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set"
                    ));
                };
                Ok(CredentialSource::Keys {
                    credentials: Credentials {
                        access_key: a,
                        secret_key: s,
                        session_token: self.env.var("AWS_SESSION_TOKEN"),
                    },
                    from: "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".into(),
                })
            }
            "EcsContainer" => container_endpoint(self.env)?
                .map(CredentialSource::Container)
                .ok_or_else(|| {
                    format!("profile {profile:?} has credential_source = EcsContainer, but neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor AWS_CONTAINER_CREDENTIALS_FULL_URI is set")
                }),
            "Ec2InstanceMetadata" => imds::settings(self.env, self.files, profile, false)?
                .map(CredentialSource::Imds)
                .ok_or_else(|| {
                    format!("profile {profile:?} has credential_source = Ec2InstanceMetadata, but AWS_EC2_METADATA_DISABLED=true turns instance metadata off")
                }),
            other => Err(format!(
                "profile {profile:?}: credential_source = {other:?} is not one of Environment, EcsContainer, Ec2InstanceMetadata"
            )),
        }
    }
}

/// The ECS task role address (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`).
pub const ECS_HOST: &str = "http://169.254.170.2";

/// The container credentials endpoint the environment names, as the SDKs
/// read it: `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (on 169.254.170.2)
/// first, else `AWS_CONTAINER_CREDENTIALS_FULL_URI`, which must be https,
/// or http to a loopback address or to the ECS / EKS Pod Identity agents
/// (169.254.170.2, 169.254.170.23, fd00:ec2::23), as the SDKs require:
/// the token is sent to it.
pub fn container_endpoint(env: &dyn Env) -> Result<Option<ContainerEndpoint>, String> {
    let url = if let Some(rel) = env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        let rel = if rel.starts_with('/') {
            rel
        } else {
            format!("/{rel}")
        };
        format!("{ECS_HOST}{rel}")
    } else if let Some(full) = env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
        let u = ferry_http::Url::parse(&full)
            .map_err(|e| format!("AWS_CONTAINER_CREDENTIALS_FULL_URI {full}: {e}"))?;
        if !u.https && !allowed_http_host(&u.host) {
            return Err(format!(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI {full}: plain http is allowed only to a loopback address or the ECS / EKS credential agents (169.254.170.2, 169.254.170.23, fd00:ec2::23), as the AWS SDKs require; use https"
            ));
        }
        full
    } else {
        return Ok(None);
    };
    Ok(Some(ContainerEndpoint {
        url,
        auth_token_file: env
            .var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
            .map(PathBuf::from),
        auth_token: env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
    }))
}

fn allowed_http_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => {
            ip.is_loopback()
                || ["169.254.170.2", "169.254.170.23", "fd00:ec2::23"]
                    .iter()
                    .any(|a| a.parse::<IpAddr>().is_ok_and(|a| a == ip))
        }
        Err(_) => false,
    }
}

/// The container endpoint's JSON: `AccessKeyId`, `SecretAccessKey`,
/// `Token`, `Expiration`. Errors never quote it (it holds secrets).
pub fn parse_container_answer(body: &[u8]) -> Result<ExpiringCredentials, String> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not JSON ({} bytes; {e})", body.len()))?;
    let field = |k: &str| -> Option<String> {
        v.get(k)
            .and_then(|x| x.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let access_key = field("AccessKeyId").ok_or("the answer has no \"AccessKeyId\"")?;
    let secret_key = field("SecretAccessKey").ok_or("the answer has no \"SecretAccessKey\"")?;
    let expiration =
        match field("Expiration") {
            None => None,
            Some(s) => Some(parse_expiration(&s).ok_or_else(|| {
                format!("the answer's \"Expiration\" {s:?} is not an ISO 8601 time")
            })?),
        };
    Ok(ExpiringCredentials {
        credentials: Credentials {
            access_key,
            secret_key,
            session_token: field("Token"),
        },
        expiration,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::s3::parse_ini;
    use crate::s3::tests::env;
    use std::time::{Duration, UNIX_EPOCH};

    fn files(credentials: &str, config: &str) -> AwsFiles {
        AwsFiles {
            credentials: parse_ini(credentials),
            config: parse_ini(config),
        }
    }

    fn sts() -> StsEndpoint {
        StsEndpoint {
            url: "https://sts.eu-west-3.amazonaws.com".into(),
            region: "eu-west-3".into(),
        }
    }

    const NOW: SystemTime = UNIX_EPOCH;

    fn resolve(
        f: &AwsFiles,
        e: &[(&str, &str)],
        p: &str,
    ) -> Result<Option<CredentialSource>, String> {
        let (env, sts) = (env(e), sts());
        let lookup = Lookup {
            files: f,
            env: &env,
            sts: &sts,
            env_web_identity: true,
            now: NOW,
        };
        profile_credentials(&lookup, p)
    }

    fn role(s: Option<CredentialSource>) -> AssumeRole {
        match s {
            Some(CredentialSource::AssumeRole(r)) => *r,
            other => panic!("not a role: {other:?}"),
        }
    }

    #[test]
    fn role_with_source_profile_keys() {
        let f = files(
            "[base]\naws_access_key_id = B\naws_secret_access_key = b\n",
            "[profile dev]\nrole_arn = arn:aws:iam::1:role/dev\nsource_profile = base\nrole_session_name = me\nexternal_id = ext\nduration_seconds = 900\naws_access_key_id = IGNORED\naws_secret_access_key = x\n",
        );
        let r = role(resolve(&f, &[], "dev").unwrap());
        assert_eq!(r.profile, "dev");
        assert_eq!(
            r.request,
            RoleRequest {
                role_arn: "arn:aws:iam::1:role/dev".into(),
                session_name: "me".into(),
                external_id: Some("ext".into()),
                duration_seconds: Some(900),
            }
        );
        assert_eq!(r.sts, sts());
        let CredentialSource::Keys { credentials, .. } = &r.source else {
            panic!("{:?}", r.source)
        };
        assert_eq!(credentials.access_key, "B");
        let d = CredentialSource::AssumeRole(Box::new(r)).describe();
        assert!(
            d.contains("arn:aws:iam::1:role/dev") && d.contains("\"base\""),
            "{d}"
        );
    }

    #[test]
    fn chained_roles_processes_and_self_reference() {
        let f = files(
            "",
            "[profile a]\nrole_arn = arn:a\nsource_profile = b\n\
             [profile b]\nrole_arn = arn:b\nsource_profile = c\n\
             [profile c]\ncredential_process = /bin/creds\n\
             [profile self]\nrole_arn = arn:s\nsource_profile = self\naws_access_key_id = S\naws_secret_access_key = s\n",
        );
        let a = role(resolve(&f, &[], "a").unwrap());
        assert!(a.request.session_name.starts_with("ferry-session-"));
        let CredentialSource::AssumeRole(b) = &a.source else {
            panic!("{:?}", a.source)
        };
        assert_eq!(b.request.role_arn, "arn:b");
        assert_eq!(
            b.source,
            CredentialSource::Process(CredentialProcess {
                profile: "c".into(),
                command: "/bin/creds".into()
            })
        );
        let s = role(resolve(&f, &[], "self").unwrap());
        assert!(
            matches!(&s.source, CredentialSource::Keys { credentials, .. } if credentials.access_key == "S")
        );
    }

    #[test]
    fn bad_role_profiles_say_why() {
        let f = files(
            "",
            "[profile a]\nrole_arn = arn:a\nsource_profile = b\n\
             [profile b]\nrole_arn = arn:b\nsource_profile = a\n\
             [profile missing]\nrole_arn = arn:m\nsource_profile = nowhere\n\
             [profile bare]\nrole_arn = arn:x\n\
             [profile both]\nrole_arn = arn:x\nsource_profile = a\ncredential_source = Environment\n\
             [profile mfa]\nrole_arn = arn:x\nsource_profile = a\nmfa_serial = arn:aws:iam::1:mfa/me\n\
             [profile empty]\nregion = r\n\
             [profile toempty]\nrole_arn = arn:x\nsource_profile = empty\n\
             [profile imds]\nrole_arn = arn:x\ncredential_source = Ec2InstanceMetadata\n\
             [profile envsrc]\nrole_arn = arn:x\ncredential_source = Environment\n\
             [profile baddur]\nrole_arn = arn:x\nsource_profile = baddur\naws_access_key_id = A\naws_secret_access_key = a\nduration_seconds = 1h\n\
             [profile selfnokeys]\nrole_arn = arn:x\nsource_profile = selfnokeys\n",
        );
        let err = |p: &str| resolve(&f, &[], p).unwrap_err();
        let e = err("a");
        assert!(e.contains("loop") && e.contains("a -> b -> a"), "{e}");
        let e = err("missing");
        assert!(e.contains("\"nowhere\"") && e.contains("neither"), "{e}");
        assert!(err("bare").contains("neither source_profile nor credential_source"));
        assert!(err("both").contains("keep one"));
        let e = err("mfa");
        assert!(
            e.contains("mfa_serial") && e.contains("AWS_SESSION_TOKEN") && e.contains("cannot ask"),
            "{e}"
        );
        let e = err("toempty");
        assert!(
            e.contains("\"empty\"") && e.contains("no credentials"),
            "{e}"
        );
        // Ec2InstanceMetadata: IMDS, whose failure is an error (not the last link).
        let r = role(resolve(&f, &[], "imds").unwrap());
        assert!(
            matches!(&r.source, CredentialSource::Imds(i) if !i.last_link && i.endpoint == imds::IPV4_ENDPOINT),
            "{:?}",
            r.source
        );
        let e = resolve(&f, &[("AWS_EC2_METADATA_DISABLED", "true")], "imds").unwrap_err();
        assert!(e.contains("AWS_EC2_METADATA_DISABLED"), "{e}");
        assert!(err("envsrc").contains("AWS_ACCESS_KEY_ID"));
        // EcsContainer: the container endpoint the environment names.
        let f2 = files(
            "",
            "[profile ecs]\nrole_arn = arn:x\ncredential_source = EcsContainer\n",
        );
        assert!(resolve(&f2, &[], "ecs")
            .unwrap_err()
            .contains("AWS_CONTAINER_CREDENTIALS"));
        let r = role(
            resolve(
                &f2,
                &[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/c")],
                "ecs",
            )
            .unwrap(),
        );
        assert!(
            matches!(&r.source, CredentialSource::Container(c) if c.url == "http://169.254.170.2/v2/c")
        );
        assert!(err("baddur").contains("duration_seconds"));
        assert!(err("selfnokeys").contains("its own source_profile"));
        // With the environment's keys, credential_source = Environment works.
        let r = role(
            resolve(
                &f,
                &[
                    ("AWS_ACCESS_KEY_ID", "E"),
                    ("AWS_SECRET_ACCESS_KEY", "e"),
                    ("AWS_SESSION_TOKEN", "t"),
                ],
                "envsrc",
            )
            .unwrap(),
        );
        assert!(
            matches!(&r.source, CredentialSource::Keys { credentials, .. }
            if credentials.access_key == "E" && credentials.session_token.as_deref() == Some("t"))
        );
    }

    #[test]
    fn web_identity_from_the_environment_or_a_profile() {
        let f = files(
            "[default]\naws_access_key_id = K\naws_secret_access_key = k\n",
            "[profile web]\nrole_arn = arn:w\nweb_identity_token_file = /t/p\nrole_session_name = s\n\
             [profile role]\nrole_arn = arn:r\nsource_profile = default\n",
        );
        let wenv = [
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t/e"),
            ("AWS_ROLE_ARN", "arn:e"),
            ("AWS_ROLE_SESSION_NAME", "es"),
        ];
        // The environment's web identity comes before a profile's keys...
        let Some(CredentialSource::WebIdentity(w)) = resolve(&f, &wenv, "default").unwrap() else {
            panic!()
        };
        assert_eq!(
            (
                w.profile,
                w.request.role_arn.as_str(),
                w.request.session_name.as_str(),
                w.token_file
            ),
            (None, "arn:e", "es", PathBuf::from("/t/e"))
        );
        // ... and after the profile's role_arn (assume role first).
        assert_eq!(
            role(resolve(&f, &wenv, "role").unwrap()).request.role_arn,
            "arn:r"
        );
        // A profile's own, its settings overridden one by one by the environment's.
        let Some(CredentialSource::WebIdentity(w)) = resolve(&f, &[], "web").unwrap() else {
            panic!()
        };
        assert_eq!(w.profile.as_deref(), Some("web"));
        assert_eq!(w.token_file, PathBuf::from("/t/p"));
        let Some(CredentialSource::WebIdentity(w)) =
            resolve(&f, &[("AWS_ROLE_SESSION_NAME", "x")], "web").unwrap()
        else {
            panic!()
        };
        assert_eq!(w.request.session_name, "x");
        // A token file and no role: said.
        let e = resolve(&f, &[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t/e")], "default").unwrap_err();
        assert!(e.contains("AWS_ROLE_ARN"), "{e}");
    }

    #[test]
    fn keys_then_process_then_container_then_imds() {
        let f = files("[k]\naws_access_key_id = K\naws_secret_access_key = k\ncredential_process = /bin/x\n[p]\ncredential_process = /bin/p\n", "");
        let c = [("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds")];
        assert!(matches!(
            resolve(&f, &c, "k").unwrap(),
            Some(CredentialSource::Keys { .. })
        ));
        assert!(matches!(
            resolve(&f, &c, "p").unwrap(),
            Some(CredentialSource::Process(_))
        ));
        let Some(CredentialSource::Container(e)) = resolve(&f, &c, "none").unwrap() else {
            panic!()
        };
        assert_eq!(e.url, "http://169.254.170.2/v2/creds");
        // Nothing else: instance metadata, the last link, unless turned off.
        let Some(CredentialSource::Imds(i)) = resolve(&f, &[], "none").unwrap() else {
            panic!()
        };
        assert!(i.last_link);
        let off = [("AWS_EC2_METADATA_DISABLED", "true")];
        assert_eq!(resolve(&f, &off, "none").unwrap(), None);
    }

    #[test]
    fn container_full_uri_only_to_loopback_or_https() {
        let ok = |u: &str| {
            container_endpoint(&env(&[
                ("AWS_CONTAINER_CREDENTIALS_FULL_URI", u),
                ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "t"),
            ]))
        };
        for u in [
            "http://127.0.0.1:8080/creds",
            "http://[::1]:80/c",
            "http://localhost/c",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
            "https://creds.example.com/c",
        ] {
            let e = ok(u).unwrap().unwrap();
            assert_eq!((e.url.as_str(), e.auth_token.as_deref()), (u, Some("t")));
        }
        for u in [
            "http://10.0.0.1/c",
            "http://example.com/c",
            "http://169.254.169.254/",
        ] {
            assert!(ok(u).unwrap_err().contains("https"), "{u}");
        }
        assert_eq!(container_endpoint(&env(&[])).unwrap(), None);
    }

    #[test]
    fn container_answers() {
        let c = parse_container_answer(
            br#"{"AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2026-11-29T13:27:31Z","RoleArn":"r"}"#,
        )
        .unwrap();
        assert_eq!(c.credentials.session_token.as_deref(), Some("T"));
        assert_eq!(
            c.expiration,
            Some(UNIX_EPOCH + Duration::from_secs(1_795_958_851))
        );
        let e = parse_container_answer(b"secret!").unwrap_err();
        assert!(e.contains("not JSON") && !e.contains("secret"), "{e}");
        assert!(parse_container_answer(br#"{"AccessKeyId":"A"}"#)
            .unwrap_err()
            .contains("SecretAccessKey"));
        assert!(parse_container_answer(
            br#"{"AccessKeyId":"A","SecretAccessKey":"S","Expiration":"x"}"#
        )
        .unwrap_err()
        .contains("Expiration"));
    }
}
