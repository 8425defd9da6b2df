//! Reading OpenSSH client configuration (`ssh_config(5)`) so that ferry
//! connects to the same place, as the same user, with the same keys and the
//! same host-key policy as `ssh` would for the same command line.
//!
//! Parsing ([`SshConfig::parse_str`], [`SshConfig::load`]) turns a file, with
//! its `Include`s, into a list of blocks; [`SshConfig::resolve`] then walks the
//! `-o` overrides and the files in order for one host, applying OpenSSH's rule
//! that the first value obtained for a keyword wins (except `IdentityFile` and
//! `CertificateFile`, which accumulate). Keywords ferry does not interpret are
//! ignored quietly rather than rejected, because the same files are read by
//! `ssh`, which may be newer than this parser; they are reported in
//! [`HostConfig::ignored`] so the caller can mention them.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha1::{Digest, Sha1};

use crate::pattern::{match_list, wildcard_match};

/// OpenSSH's `READCONF_MAX_DEPTH`: an `Include` cycle ends here with an error
/// instead of recursing forever.
pub const MAX_INCLUDE_DEPTH: usize = 16;

/// Where the system-wide configuration lives; relative `Include`s in system
/// files are taken relative to it.
pub const SYSTEM_CONFIG_DIR: &str = "/etc/ssh";

/// `StrictHostKeyChecking`: what to do with an unknown or changed host key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StrictHostKeyChecking {
    /// Never add keys automatically; refuse unknown hosts.
    Yes,
    /// Add keys of unknown hosts, refuse changed keys.
    AcceptNew,
    /// Add keys of unknown hosts; changed keys still refused by ferry's caller
    /// (OpenSSH only limits what it allows in that case).
    No,
    /// Ask the user (OpenSSH's default).
    #[default]
    Ask,
}

impl StrictHostKeyChecking {
    fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "yes" | "true" => Some(Self::Yes),
            "no" | "false" | "off" => Some(Self::No),
            "accept-new" => Some(Self::AcceptNew),
            "ask" => Some(Self::Ask),
            _ => None,
        }
    }
}

/// Whether a file is the user's configuration or the system-wide one. It
/// decides what relative `Include` paths are relative to (`~/.ssh` or
/// `/etc/ssh`), as in OpenSSH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    User,
    System,
}

impl ConfigKind {
    /// Files under `/etc/ssh` are system configuration, everything else
    /// (including a `-F` file) is user configuration, as `ssh` treats them.
    pub fn for_path(path: &Path) -> Self {
        if path.starts_with(SYSTEM_CONFIG_DIR) {
            Self::System
        } else {
            Self::User
        }
    }
}

/// The facts about the local process that configuration depends on (`~`,
/// `%u`, `%l`, ...). Separate from the process environment so tests and
/// callers can resolve without touching global state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// Home directory for `~` and `%d`; `None` when it cannot be determined.
    pub home: Option<PathBuf>,
    /// Local login name: `%u`, the default remote user, `Match localuser`.
    pub local_user: String,
    /// Local host name for `%l` (`%L` is its first label).
    pub local_hostname: String,
    /// Local numeric user id for `%i`.
    pub uid: Option<u32>,
}

impl Environment {
    /// Read the environment of the current process. `$HOME` wins over the
    /// password database when set and non-empty, so tests can redirect `~`.
    pub fn from_process() -> Self {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(dirs::home_dir);
        let uid = current_uid();
        let local_user = ["USER", "LOGNAME"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .find(|v| !v.is_empty())
            .or_else(|| uid.and_then(passwd_name_for_uid))
            .unwrap_or_else(|| "unknown".to_string());
        Self {
            home,
            local_user,
            local_hostname: local_hostname(),
            uid,
        }
    }
}

#[cfg(unix)]
fn current_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's uid; avoids a libc dependency.
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

#[cfg(not(unix))]
fn current_uid() -> Option<u32> {
    None
}

fn local_hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_string())
}

/// Fields of `/etc/passwd` entries: (name, uid, home).
fn passwd_entries() -> Vec<(String, Option<u32>, PathBuf)> {
    let Ok(text) = std::fs::read_to_string("/etc/passwd") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let name = fields.first()?;
            let home = fields.get(5)?;
            Some((
                name.to_string(),
                fields.get(2).and_then(|u| u.parse().ok()),
                PathBuf::from(home),
            ))
        })
        .collect()
}

fn passwd_name_for_uid(uid: u32) -> Option<String> {
    passwd_entries()
        .into_iter()
        .find(|(_, u, _)| *u == Some(uid))
        .map(|(n, _, _)| n)
}

fn passwd_home_for_name(name: &str) -> Option<PathBuf> {
    passwd_entries()
        .into_iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, _, h)| h)
}

/// The settings ferry uses for one connection, after applying overrides,
/// configuration files and OpenSSH's defaults.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The host as the user typed it.
    pub host_alias: String,
    /// What to connect to: `HostName` (with `%h` expanded) or the alias.
    pub hostname: String,
    pub port: u16,
    pub user: String,
    /// All `IdentityFile`s in order, expanded; OpenSSH's defaults when none
    /// was configured (whether or not they exist: the caller filters).
    pub identity_files: Vec<PathBuf>,
    /// True when `identity_files` came from configuration or overrides
    /// rather than the defaults (a missing explicit file deserves a warning).
    pub identity_files_explicit: bool,
    /// All `CertificateFile`s in order, expanded.
    pub certificate_files: Vec<PathBuf>,
    pub identities_only: bool,
    pub user_known_hosts_files: Vec<PathBuf>,
    pub global_known_hosts_files: Vec<PathBuf>,
    pub strict_host_key_checking: StrictHostKeyChecking,
    /// `HashKnownHosts`: write learned host keys hashed.
    pub hash_known_hosts: bool,
    /// `HostKeyAlias`: the name to look up in known_hosts instead of the host.
    pub host_key_alias: Option<String>,
    /// `RevokedHostKeys`: host keys listed in this file are refused, and
    /// every host key is refused when the file cannot be read (OpenSSH's
    /// rule). See [`crate::known_hosts::revoked_in`].
    pub revoked_host_keys: Option<PathBuf>,
    pub password_authentication: bool,
    pub pubkey_authentication: bool,
    pub kbd_interactive_authentication: bool,
    pub batch_mode: bool,
    /// `IdentityAgent`: "none", "SSH_AUTH_SOCK", "$VAR" (all kept verbatim),
    /// or a socket path (expanded).
    pub identity_agent: Option<String>,
    pub connect_timeout: Option<Duration>,
    pub compression: bool,
    /// `RekeyLimit`: bytes after which to rekey (`default`: none here,
    /// the transport's own), and the time (`none` or absent: no limit).
    pub rekey_limit: Option<u64>,
    pub rekey_time: Option<Duration>,
    /// Raw algorithm lists (may start with `+`, `-` or `^`): the caller
    /// interprets them against what it supports.
    pub ciphers: Option<String>,
    pub macs: Option<String>,
    pub kex_algorithms: Option<String>,
    pub host_key_algorithms: Option<String>,
    pub preferred_authentications: Option<String>,
    pub server_alive_interval: Option<Duration>,
    pub server_alive_count_max: u32,
    pub number_of_password_prompts: u32,
    /// `ProxyJump` / `ProxyCommand` verbatim ("none" resolves to `None`).
    /// At most one is set: whichever came first, as in OpenSSH. Use
    /// [`crate::proxy::parse_jumps`] and [`HostConfig::proxy_command_line`].
    pub proxy_jump: Option<String>,
    pub proxy_command: Option<String>,
    /// Keywords (lower-case, first occurrence order) that applied to this
    /// host but that ferry does not interpret.
    pub ignored: Vec<String>,
}

impl HostConfig {
    /// User files first, then global ones: the order OpenSSH searches them.
    pub fn known_hosts_files(&self) -> Vec<PathBuf> {
        self.user_known_hosts_files
            .iter()
            .chain(&self.global_known_hosts_files)
            .cloned()
            .collect()
    }

    /// `ProxyCommand` with its tokens expanded (`%h` HostName, `%p` port,
    /// `%r` user, `%n` the host as typed, `%%`), ready for `sh -c`.
    pub fn proxy_command_line(&self) -> Result<Option<String>, String> {
        let Some(cmd) = &self.proxy_command else {
            return Ok(None);
        };
        let port = self.port.to_string();
        let tokens = [
            ('h', self.hostname.as_str()),
            ('p', port.as_str()),
            ('r', self.user.as_str()),
            ('n', self.host_alias.as_str()),
        ];
        expand_tokens(cmd, &tokens, false)
            .map(Some)
            .map_err(|m| format!("ProxyCommand {m}"))
    }

    /// The (name, port) to look up in known_hosts. A `HostKeyAlias` is used
    /// as a bare name, without `[...]:port`, exactly as `ssh` does.
    pub fn known_hosts_lookup(&self) -> (String, u16) {
        match &self.host_key_alias {
            Some(alias) => (alias.clone(), 22),
            None => (self.hostname.clone(), self.port),
        }
    }
}

/// A configuration problem, naming where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}:{line}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("command-line option \"-o {option}\": {message}")]
    Option { option: String, message: String },
}

/// Where a directive came from, for error messages.
#[derive(Debug, Clone)]
enum Origin {
    File { path: Arc<Path>, line: usize },
    CommandLine { option: Arc<str> },
}

impl Origin {
    fn error(&self, message: impl Into<String>) -> ConfigError {
        match self {
            Origin::File { path, line } => ConfigError::Syntax {
                path: path.to_path_buf(),
                line: *line,
                message: message.into(),
            },
            Origin::CommandLine { option } => ConfigError::Option {
                option: option.to_string(),
                message: message.into(),
            },
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line } => write!(f, "{}:{line}", path.display()),
            Origin::CommandLine { option } => write!(f, "-o {option}"),
        }
    }
}

/// One parsed configuration file (with its `Include`d files inside it).
#[derive(Debug, Clone)]
pub struct SshConfig {
    origin: PathBuf,
    items: Vec<Item>,
}

#[derive(Debug, Clone)]
enum Item {
    /// `Host` line: starts a block whose activity depends on the patterns.
    Host(Vec<String>),
    /// `Match` line: starts a block whose activity depends on the criteria.
    Match(Vec<Criterion>),
    Setting(Setting, Origin),
    /// The files one `Include` line expanded to, in glob order. Kept nested
    /// because OpenSSH restores the enclosing block's state after each file.
    Include(Vec<SshConfig>),
}

#[derive(Debug, Clone)]
struct Criterion {
    negated: bool,
    kind: CriterionKind,
}

#[derive(Debug, Clone)]
enum CriterionKind {
    All,
    /// `canonical` and `final`: true only in the second ("final") pass.
    FinalPass,
    Host(String),
    OriginalHost(String),
    User(String),
    LocalUser(String),
    /// `exec`, `localnetwork`, ... or unknown: ferry cannot evaluate these,
    /// so the block never applies (whatever the negation).
    Unsupported,
}

#[derive(Debug, Clone)]
enum Setting {
    HostName(String),
    Port(u16),
    User(String),
    IdentityFile(String),
    CertificateFile(String),
    IdentitiesOnly(bool),
    UserKnownHostsFile(Vec<String>),
    GlobalKnownHostsFile(Vec<String>),
    StrictHostKeyChecking(StrictHostKeyChecking),
    HashKnownHosts(bool),
    HostKeyAlias(String),
    RevokedHostKeys(Option<String>),
    PasswordAuthentication(bool),
    PubkeyAuthentication(bool),
    KbdInteractiveAuthentication(bool),
    BatchMode(bool),
    IdentityAgent(String),
    ConnectTimeout(Option<Duration>),
    Compression(bool),
    RekeyLimit(Option<u64>, Option<Duration>),
    Ciphers(String),
    Macs(String),
    KexAlgorithms(String),
    HostKeyAlgorithms(String),
    PreferredAuthentications(String),
    ServerAliveInterval(Option<Duration>),
    ServerAliveCountMax(u32),
    NumberOfPasswordPrompts(u32),
    ProxyJump(Option<String>),
    ProxyCommand(Option<String>),
    /// A keyword ferry does not interpret (lower-cased).
    Ignored(String),
}

/// One non-blank, non-comment line split the way OpenSSH splits it.
struct Line<'a> {
    keyword: &'a str,
    args: Vec<String>,
    /// Everything after the keyword and separator, unsplit (`ProxyCommand`).
    rest: &'a str,
}

const WS: [char; 2] = [' ', '\t'];

/// OpenSSH's `strdelim` + `argv_split`: keyword ends at whitespace or `=`;
/// one `=` may separate it from the value, with whitespace either side.
fn split_line(line: &str) -> Result<Option<Line<'_>>, String> {
    let s = line.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\r' | '\n' | '\x0c'));
    if s.is_empty() || s.starts_with('#') {
        return Ok(None);
    }
    let kw_end = s.find([' ', '\t', '=']).unwrap_or(s.len());
    let (keyword, mut rest) = s.split_at(kw_end);
    if keyword.is_empty() {
        return Err("missing keyword before '='".to_string());
    }
    let had_equals = rest.starts_with('=');
    if had_equals {
        rest = &rest[1..];
    }
    rest = rest.trim_start_matches(WS);
    if !had_equals {
        if let Some(r) = rest.strip_prefix('=') {
            rest = r.trim_start_matches(WS);
        }
    }
    let args = split_args(rest)?;
    if args.is_empty() {
        return Err(format!("no argument after keyword \"{keyword}\""));
    }
    Ok(Some(Line {
        keyword,
        args,
        rest,
    }))
}

/// OpenSSH `argv_split` with comment termination: whitespace-separated
/// words, `"` and `'` quoting, backslash escaping quotes, backslash and
/// (outside quotes) space; `#` at the start of a word ends the line.
fn split_args(s: &str) -> Result<Vec<String>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut args = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == ' ' || c == '\t' {
            i += 1;
            continue;
        }
        if c == '#' {
            break;
        }
        let mut arg = String::new();
        let mut quote: Option<char> = None;
        while i < chars.len() {
            let c = chars[i];
            if c == '\\' {
                match chars.get(i + 1).copied() {
                    Some(n)
                        if n == '\'' || n == '"' || n == '\\' || (quote.is_none() && n == ' ') =>
                    {
                        arg.push(n);
                        i += 2;
                        continue;
                    }
                    _ => arg.push(c),
                }
            } else if quote.is_none() && (c == ' ' || c == '\t') {
                break;
            } else if quote.is_none() && (c == '"' || c == '\'') {
                quote = Some(c);
            } else if quote == Some(c) {
                quote = None;
            } else {
                arg.push(c);
            }
            i += 1;
        }
        if quote.is_some() {
            return Err("unterminated quoted string".to_string());
        }
        args.push(arg);
    }
    Ok(args)
}

fn single<'a>(keyword: &str, args: &'a [String]) -> Result<&'a str, String> {
    match args {
        [one] => Ok(one),
        _ => Err(format!(
            "{keyword} takes one argument, got {} (quote values containing spaces)",
            args.len()
        )),
    }
}

fn parse_bool(keyword: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("{keyword}: expected yes or no, got \"{value}\"")),
    }
}

/// OpenSSH `convtime`: `90`, `90s`, `1m30s`, `2h`, `1d`, `1w`.
fn parse_time(keyword: &str, value: &str) -> Result<Option<Duration>, String> {
    let bad = || format!("{keyword}: invalid time value \"{value}\"");
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    if value.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            digits.push(c);
            if chars.peek().is_some() {
                continue;
            }
        }
        let multiplier: u64 = if c.is_ascii_digit() {
            1
        } else {
            match c.to_ascii_lowercase() {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86_400,
                'w' => 604_800,
                _ => return Err(bad()),
            }
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n
            .checked_mul(multiplier)
            .and_then(|v| total.checked_add(v))
            .filter(|v| *v <= i32::MAX as u64)
            .ok_or_else(bad)?;
    }
    // 0 means "no timeout" / "no keepalives" in OpenSSH.
    Ok((total > 0).then(|| Duration::from_secs(total)))
}

/// `RekeyLimit`'s size: `default`, or bytes with an optional K, M or G
/// (powers of 1024), as ssh_config(5) says; at least 16 bytes, as in ssh.
fn parse_rekey_bytes(keyword: &str, value: &str) -> Result<Option<u64>, String> {
    if value.eq_ignore_ascii_case("default") {
        return Ok(None);
    }
    let bad = || format!("{keyword}: invalid size \"{value}\"");
    let (digits, shift) = match value.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                _ => return Err(bad()),
            };
            (value.get(..i).unwrap_or(""), shift)
        }
        _ => (value, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = n
        .checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(bad)?;
    if bytes < 16 {
        return Err(format!(
            "{keyword}: {value} is too small (at least 16 bytes)"
        ));
    }
    Ok(Some(bytes))
}

fn parse_u32(keyword: &str, value: &str) -> Result<u32, String> {
    value
        .parse()
        .map_err(|_| format!("{keyword}: expected a number, got \"{value}\""))
}

fn none_or(value: &str) -> Option<String> {
    (!value.eq_ignore_ascii_case("none")).then(|| value.to_string())
}

/// Type-checks a (non-structural) directive. Values are validated even in
/// blocks that do not apply to the current host, as OpenSSH does, so a typo
/// is reported the first time rather than when some host finally hits it.
fn parse_setting(line: &Line<'_>) -> Result<Setting, String> {
    let kw = line.keyword;
    let args = &line.args;
    let lower = kw.to_ascii_lowercase();
    let one = || single(kw, args);
    let boolean = || one().and_then(|v| parse_bool(kw, v));
    Ok(match lower.as_str() {
        "hostname" => Setting::HostName(one()?.to_string()),
        "port" => {
            let v = one()?;
            match v.parse::<u16>() {
                Ok(p) if p > 0 => Setting::Port(p),
                _ => return Err(format!("bad port \"{v}\" (expected 1-65535)")),
            }
        }
        "user" => Setting::User(one()?.to_string()),
        "identityfile" => Setting::IdentityFile(one()?.to_string()),
        "certificatefile" => Setting::CertificateFile(one()?.to_string()),
        "identitiesonly" => Setting::IdentitiesOnly(boolean()?),
        "userknownhostsfile" => Setting::UserKnownHostsFile(args.clone()),
        "globalknownhostsfile" => Setting::GlobalKnownHostsFile(args.clone()),
        "stricthostkeychecking" => {
            let v = one()?;
            Setting::StrictHostKeyChecking(
                StrictHostKeyChecking::parse(v).ok_or_else(|| {
                    format!("{kw}: expected yes, no, accept-new or ask, got \"{v}\"")
                })?,
            )
        }
        "hashknownhosts" => Setting::HashKnownHosts(boolean()?),
        "hostkeyalias" => Setting::HostKeyAlias(one()?.to_string()),
        "revokedhostkeys" => Setting::RevokedHostKeys(none_or(one()?)),
        "passwordauthentication" => Setting::PasswordAuthentication(boolean()?),
        "pubkeyauthentication" => {
            let v = one()?;
            // OpenSSH 8.9+: "unbound"/"host-bound" are flavours of "yes".
            if v.eq_ignore_ascii_case("unbound") || v.eq_ignore_ascii_case("host-bound") {
                Setting::PubkeyAuthentication(true)
            } else {
                Setting::PubkeyAuthentication(parse_bool(kw, v)?)
            }
        }
        "kbdinteractiveauthentication" | "challengeresponseauthentication" => {
            Setting::KbdInteractiveAuthentication(boolean()?)
        }
        "batchmode" => Setting::BatchMode(boolean()?),
        "identityagent" => Setting::IdentityAgent(one()?.to_string()),
        "connecttimeout" => Setting::ConnectTimeout(parse_time(kw, one()?)?),
        "compression" => Setting::Compression(boolean()?),
        "rekeylimit" => match args.as_slice() {
            [bytes] => Setting::RekeyLimit(parse_rekey_bytes(kw, bytes)?, None),
            [bytes, time] => {
                Setting::RekeyLimit(parse_rekey_bytes(kw, bytes)?, parse_time(kw, time)?)
            }
            _ => return Err(format!("{kw} takes a size and optionally a time")),
        },
        "ciphers" => Setting::Ciphers(one()?.to_string()),
        "macs" => Setting::Macs(one()?.to_string()),
        "kexalgorithms" => Setting::KexAlgorithms(one()?.to_string()),
        "hostkeyalgorithms" => Setting::HostKeyAlgorithms(one()?.to_string()),
        "preferredauthentications" => Setting::PreferredAuthentications(one()?.to_string()),
        "serveraliveinterval" => Setting::ServerAliveInterval(parse_time(kw, one()?)?),
        "serveralivecountmax" => Setting::ServerAliveCountMax(parse_u32(kw, one()?)?),
        "numberofpasswordprompts" => Setting::NumberOfPasswordPrompts(parse_u32(kw, one()?)?),
        "proxyjump" => Setting::ProxyJump(none_or(one()?)),
        // The command is a shell line: keep it unsplit, like OpenSSH.
        "proxycommand" => Setting::ProxyCommand(none_or(line.rest)),
        _ => Setting::Ignored(lower),
    })
}

fn parse_match(args: &[String]) -> Result<Vec<Criterion>, String> {
    let mut criteria = Vec::new();
    let mut it = args.iter();
    let mut saw_all = false;
    while let Some(arg) = it.next() {
        let (negated, word) = match arg.strip_prefix('!') {
            Some(w) => (true, w),
            None => (false, arg.as_str()),
        };
        // Newer OpenSSH also accepts `criterion=value`.
        let (name, inline_value) = match word.split_once('=') {
            Some((n, v)) => (n.to_ascii_lowercase(), Some(v.to_string())),
            None => (word.to_ascii_lowercase(), None),
        };
        let kind = match name.as_str() {
            "all" => {
                saw_all = true;
                CriterionKind::All
            }
            "canonical" | "final" => CriterionKind::FinalPass,
            _ => {
                let value = match inline_value {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("Match {name}: missing argument"))?,
                };
                match name.as_str() {
                    "host" => CriterionKind::Host(value),
                    "originalhost" => CriterionKind::OriginalHost(value),
                    "user" => CriterionKind::User(value),
                    "localuser" => CriterionKind::LocalUser(value),
                    _ => CriterionKind::Unsupported,
                }
            }
        };
        criteria.push(Criterion { negated, kind });
    }
    if criteria.is_empty() {
        return Err("Match: missing criteria".to_string());
    }
    if saw_all
        && criteria
            .iter()
            .any(|c| !matches!(c.kind, CriterionKind::All | CriterionKind::FinalPass))
    {
        return Err("Match all cannot be combined with other criteria".to_string());
    }
    Ok(criteria)
}

/// `~`, `~/x` and `~user/x`.
fn expand_tilde(value: &str, env: &Environment) -> Result<String, String> {
    let Some(after) = value.strip_prefix('~') else {
        return Ok(value.to_string());
    };
    let (user, tail) = match after.find('/') {
        Some(i) => after.split_at(i),
        None => (after, ""),
    };
    let home = if user.is_empty() || user == env.local_user {
        env.home
            .clone()
            .ok_or_else(|| format!("cannot expand \"{value}\": home directory unknown"))?
    } else {
        passwd_home_for_name(user)
            .ok_or_else(|| format!("cannot expand \"{value}\": no such user \"{user}\""))?
    };
    let home = home.to_string_lossy();
    Ok(format!("{}{tail}", home.trim_end_matches('/')))
}

/// OpenSSH `percent_expand` (and, when `env_vars`, `${VAR}` expansion) in one
/// pass, so a value substituted in is never expanded again.
fn expand_tokens(value: &str, tokens: &[(char, &str)], env_vars: bool) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                None => return Err(format!("\"{value}\": '%' at end of value")),
                Some('%') => out.push('%'),
                Some(t) => match tokens.iter().find(|(k, _)| *k == t) {
                    Some((_, v)) => out.push_str(v),
                    None => return Err(format!("\"{value}\": unknown or unsupported token %{t}")),
                },
            },
            '$' if env_vars && chars.peek() == Some(&'{') => {
                chars.next();
                let mut name = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("\"{value}\": unterminated ${{")),
                        Some('}') => break,
                        Some(ch) => name.push(ch),
                    }
                }
                match std::env::var(&name) {
                    Ok(v) => out.push_str(&v),
                    Err(_) => {
                        return Err(format!(
                            "\"{value}\": environment variable {name} is not set"
                        ))
                    }
                }
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

struct Parser<'a> {
    kind: ConfigKind,
    env: &'a Environment,
}

impl Parser<'_> {
    fn parse(&self, text: &str, origin: &Path, depth: usize) -> Result<SshConfig, ConfigError> {
        let path: Arc<Path> = Arc::from(origin);
        let mut items = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let loc = Origin::File {
                path: path.clone(),
                line: index + 1,
            };
            let line = match split_line(raw) {
                Ok(Some(line)) => line,
                Ok(None) => continue,
                Err(msg) => return Err(loc.error(msg)),
            };
            match line.keyword.to_ascii_lowercase().as_str() {
                "host" => items.push(Item::Host(line.args)),
                "match" => items.push(Item::Match(
                    parse_match(&line.args).map_err(|m| loc.error(m))?,
                )),
                "include" => {
                    if depth >= MAX_INCLUDE_DEPTH {
                        return Err(loc.error(format!(
                            "Include nested too deeply (more than {MAX_INCLUDE_DEPTH} levels; a loop?)"
                        )));
                    }
                    for arg in &line.args {
                        let pattern = self.include_path(arg).map_err(|m| loc.error(m))?;
                        let files = glob_last_component(&pattern).map_err(|e| {
                            loc.error(format!("Include {}: {e}", pattern.display()))
                        })?;
                        let mut configs = Vec::new();
                        for file in files {
                            let text = match read_config_text(&file) {
                                Ok(t) => t,
                                // A file that vanished between listing and reading:
                                // same as no match.
                                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                                Err(e) => {
                                    return Err(
                                        loc.error(format!("Include {}: {e}", file.display()))
                                    )
                                }
                            };
                            configs.push(self.parse(&text, &file, depth + 1)?);
                        }
                        items.push(Item::Include(configs));
                    }
                }
                _ => items.push(Item::Setting(
                    parse_setting(&line).map_err(|m| loc.error(m))?,
                    loc,
                )),
            }
        }
        Ok(SshConfig {
            origin: origin.to_path_buf(),
            items,
        })
    }

    fn include_path(&self, arg: &str) -> Result<PathBuf, String> {
        let expanded = if self.kind == ConfigKind::User {
            expand_tilde(arg, self.env)?
        } else {
            arg.to_string()
        };
        let path = PathBuf::from(expanded);
        if path.is_absolute() {
            return Ok(path);
        }
        Ok(match self.kind {
            ConfigKind::User => self
                .env
                .home
                .as_ref()
                .ok_or_else(|| format!("Include {arg}: home directory unknown"))?
                .join(".ssh")
                .join(path),
            ConfigKind::System => Path::new(SYSTEM_CONFIG_DIR).join(path),
        })
    }
}

/// Expand `*` and `?` in the last path component only (enough for the
/// usual `Include config.d/*`), sorted like glob(3). No match is not an
/// error, as in OpenSSH; wildcards do not match a leading dot.
fn glob_last_component(pattern: &Path) -> io::Result<Vec<PathBuf>> {
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return Ok(if pattern.exists() {
            vec![pattern.to_path_buf()]
        } else {
            Vec::new()
        });
    }
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if entry_name.starts_with('.') && !name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if wildcard_match(&name, &entry_name, false) && path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn read_config_text(path: &Path) -> io::Result<String> {
    let bytes = std::fs::read(path)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Values collected while walking the configuration: the first one wins.
#[derive(Default)]
struct Values {
    hostname: Option<(String, Origin)>,
    port: Option<u16>,
    user: Option<String>,
    identity_files: Vec<(String, Origin)>,
    certificate_files: Vec<(String, Origin)>,
    identities_only: Option<bool>,
    user_known_hosts: Option<(Vec<String>, Origin)>,
    global_known_hosts: Option<(Vec<String>, Origin)>,
    strict: Option<StrictHostKeyChecking>,
    hash_known_hosts: Option<bool>,
    host_key_alias: Option<String>,
    revoked_host_keys: Option<(Option<String>, Origin)>,
    password_auth: Option<bool>,
    pubkey_auth: Option<bool>,
    kbd_auth: Option<bool>,
    batch_mode: Option<bool>,
    identity_agent: Option<(String, Origin)>,
    connect_timeout: Option<Option<Duration>>,
    compression: Option<bool>,
    rekey_limit: Option<(Option<u64>, Option<Duration>)>,
    ciphers: Option<String>,
    macs: Option<String>,
    kex: Option<String>,
    host_key_algorithms: Option<String>,
    preferred_auth: Option<String>,
    server_alive_interval: Option<Option<Duration>>,
    server_alive_count_max: Option<u32>,
    password_prompts: Option<u32>,
    proxy_jump: Option<Option<String>>,
    proxy_command: Option<Option<String>>,
    ignored: Vec<String>,
}

fn first<T>(slot: &mut Option<T>, value: T) {
    if slot.is_none() {
        *slot = Some(value);
    }
}

impl Values {
    fn apply(&mut self, setting: &Setting, origin: &Origin) {
        match setting.clone() {
            Setting::HostName(v) => first(&mut self.hostname, (v, origin.clone())),
            Setting::Port(v) => first(&mut self.port, v),
            Setting::User(v) => first(&mut self.user, v),
            Setting::IdentityFile(v) => {
                // OpenSSH drops duplicates (the final pass re-reads everything).
                if !self.identity_files.iter().any(|(f, _)| *f == v) {
                    self.identity_files.push((v, origin.clone()));
                }
            }
            Setting::CertificateFile(v) => {
                if !self.certificate_files.iter().any(|(f, _)| *f == v) {
                    self.certificate_files.push((v, origin.clone()));
                }
            }
            Setting::IdentitiesOnly(v) => first(&mut self.identities_only, v),
            Setting::UserKnownHostsFile(v) => {
                first(&mut self.user_known_hosts, (v, origin.clone()))
            }
            Setting::GlobalKnownHostsFile(v) => {
                first(&mut self.global_known_hosts, (v, origin.clone()))
            }
            Setting::StrictHostKeyChecking(v) => first(&mut self.strict, v),
            Setting::HashKnownHosts(v) => first(&mut self.hash_known_hosts, v),
            Setting::HostKeyAlias(v) => first(&mut self.host_key_alias, v),
            Setting::RevokedHostKeys(v) => first(&mut self.revoked_host_keys, (v, origin.clone())),
            Setting::PasswordAuthentication(v) => first(&mut self.password_auth, v),
            Setting::PubkeyAuthentication(v) => first(&mut self.pubkey_auth, v),
            Setting::KbdInteractiveAuthentication(v) => first(&mut self.kbd_auth, v),
            Setting::BatchMode(v) => first(&mut self.batch_mode, v),
            Setting::IdentityAgent(v) => first(&mut self.identity_agent, (v, origin.clone())),
            Setting::ConnectTimeout(v) => first(&mut self.connect_timeout, v),
            Setting::Compression(v) => first(&mut self.compression, v),
            Setting::RekeyLimit(b, t) => first(&mut self.rekey_limit, (b, t)),
            Setting::Ciphers(v) => first(&mut self.ciphers, v),
            Setting::Macs(v) => first(&mut self.macs, v),
            Setting::KexAlgorithms(v) => first(&mut self.kex, v),
            Setting::HostKeyAlgorithms(v) => first(&mut self.host_key_algorithms, v),
            Setting::PreferredAuthentications(v) => first(&mut self.preferred_auth, v),
            Setting::ServerAliveInterval(v) => first(&mut self.server_alive_interval, v),
            Setting::ServerAliveCountMax(v) => first(&mut self.server_alive_count_max, v),
            Setting::NumberOfPasswordPrompts(v) => first(&mut self.password_prompts, v),
            // The two exclude each other and the first one seen wins,
            // `none` included (readconf.c: parse_jump, oProxyCommand).
            Setting::ProxyJump(v) if self.proxy_command.is_none() => first(&mut self.proxy_jump, v),
            Setting::ProxyCommand(v) if self.proxy_jump.is_none() => {
                first(&mut self.proxy_command, v)
            }
            Setting::ProxyJump(_) | Setting::ProxyCommand(_) => {}
            Setting::Ignored(k) => {
                if !self.ignored.contains(&k) {
                    self.ignored.push(k);
                }
            }
        }
    }
}

struct Resolver<'a> {
    env: &'a Environment,
    /// The host as typed, lower-cased for matching (ssh lower-cases it too).
    original: String,
    final_pass: bool,
    wants_final_pass: bool,
    values: Values,
}

impl Resolver<'_> {
    /// Walk one file's items. `active` is the state the file starts in (the
    /// enclosing block's, for an included file); `never` marks an include
    /// from an inactive block, where nothing may become active.
    fn walk(&mut self, items: &[Item], mut active: bool, never: bool) {
        for item in items {
            match item {
                Item::Host(patterns) => active = !never && self.host_matches(patterns),
                Item::Match(criteria) => active = !never && self.match_matches(criteria),
                Item::Setting(setting, origin) => {
                    if active {
                        self.values.apply(setting, origin);
                    }
                }
                Item::Include(configs) => {
                    for config in configs {
                        self.walk(&config.items, active, never || !active);
                    }
                }
            }
        }
    }

    fn host_matches(&self, patterns: &[String]) -> bool {
        let mut matched = false;
        for pattern in patterns {
            if let Some(neg) = pattern.strip_prefix('!') {
                if wildcard_match(neg, &self.original, true) {
                    return false;
                }
            } else if wildcard_match(pattern, &self.original, true) {
                matched = true;
            }
        }
        matched
    }

    fn match_matches(&mut self, criteria: &[Criterion]) -> bool {
        let mut result = true;
        for c in criteria {
            let hit = match &c.kind {
                CriterionKind::All => true,
                CriterionKind::FinalPass => {
                    self.wants_final_pass = true;
                    self.final_pass
                }
                CriterionKind::Host(list) => match_list(&self.current_host(), list, true),
                CriterionKind::OriginalHost(list) => match_list(&self.original, list, true),
                CriterionKind::User(list) => {
                    let user = self.values.user.as_deref().unwrap_or(&self.env.local_user);
                    match_list(user, list, false)
                }
                CriterionKind::LocalUser(list) => match_list(&self.env.local_user, list, false),
                CriterionKind::Unsupported => return false,
            };
            if hit == c.negated {
                result = false;
            }
        }
        result
    }

    /// `Match host` sees `HostName` if one was already set, `%h` expanded.
    fn current_host(&self) -> String {
        match &self.values.hostname {
            Some((h, _)) => expand_tokens(h, &[('h', &self.original)], false)
                .unwrap_or_else(|_| h.clone())
                .to_ascii_lowercase(),
            None => self.original.clone(),
        }
    }
}

impl SshConfig {
    /// Parse configuration text. `origin` names the file in error messages,
    /// and decides (see [`ConfigKind::for_path`]) what relative `Include`s
    /// are relative to. Uses the process environment for `~`.
    pub fn parse_str(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        Self::parse_str_with(
            text,
            origin,
            ConfigKind::for_path(origin),
            &Environment::from_process(),
        )
    }

    /// [`SshConfig::parse_str`] with an explicit kind and environment.
    pub fn parse_str_with(
        text: &str,
        origin: &Path,
        kind: ConfigKind,
        env: &Environment,
    ) -> Result<Self, ConfigError> {
        Parser { kind, env }.parse(text, origin, 0)
    }

    /// Read and parse a file; a missing file is an error.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(
            path,
            ConfigKind::for_path(path),
            &Environment::from_process(),
        )
    }

    /// Read and parse a file; a missing file is an empty configuration.
    pub fn load_optional(path: &Path) -> Result<Self, ConfigError> {
        Self::load_optional_with(
            path,
            ConfigKind::for_path(path),
            &Environment::from_process(),
        )
    }

    /// [`SshConfig::load`] with an explicit kind and environment.
    pub fn load_with(
        path: &Path,
        kind: ConfigKind,
        env: &Environment,
    ) -> Result<Self, ConfigError> {
        let text = read_config_text(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse_str_with(&text, path, kind, env)
    }

    /// [`SshConfig::load_optional`] with an explicit kind and environment.
    pub fn load_optional_with(
        path: &Path,
        kind: ConfigKind,
        env: &Environment,
    ) -> Result<Self, ConfigError> {
        match Self::load_with(path, kind, env) {
            Err(ConfigError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(Self::empty(path))
            }
            other => other,
        }
    }

    /// A configuration with no directives.
    pub fn empty(origin: &Path) -> Self {
        Self {
            origin: origin.to_path_buf(),
            items: Vec::new(),
        }
    }

    /// The file this configuration was read from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Resolve the settings for `host` with OpenSSH precedence: `overrides`
    /// (`-o` options, `Key=Value` or `Key Value`) first, then `files` in
    /// order; the first value obtained for a keyword wins, except
    /// `IdentityFile` and `CertificateFile`, which accumulate. Uses the
    /// process environment (`$HOME`, `$USER`).
    pub fn resolve(
        host: &str,
        overrides: &[String],
        files: &[SshConfig],
    ) -> Result<HostConfig, ConfigError> {
        Self::resolve_with(host, overrides, files, &Environment::from_process())
    }

    /// [`SshConfig::resolve`] with an explicit environment.
    pub fn resolve_with(
        host: &str,
        overrides: &[String],
        files: &[SshConfig],
        env: &Environment,
    ) -> Result<HostConfig, ConfigError> {
        let mut resolver = Resolver {
            env,
            original: host.to_ascii_lowercase(),
            final_pass: false,
            wants_final_pass: false,
            values: Values::default(),
        };
        for option in overrides {
            let origin = Origin::CommandLine {
                option: Arc::from(option.as_str()),
            };
            let line = match split_line(option) {
                Ok(Some(line)) => line,
                Ok(None) => return Err(origin.error("empty option")),
                Err(msg) => return Err(origin.error(msg)),
            };
            match line.keyword.to_ascii_lowercase().as_str() {
                k @ ("host" | "match" | "include") => {
                    return Err(
                        origin.error(format!("\"{k}\" is not allowed as a command-line option"))
                    )
                }
                _ => {
                    let setting = parse_setting(&line).map_err(|m| origin.error(m))?;
                    resolver.values.apply(&setting, &origin);
                }
            }
        }
        for file in files {
            resolver.walk(&file.items, true, false);
        }
        // OpenSSH re-reads the configuration once more when a `Match final`
        // (or `canonical`) was seen; values from the first pass still win.
        if resolver.wants_final_pass {
            resolver.final_pass = true;
            for file in files {
                resolver.walk(&file.items, true, false);
            }
        }
        finish(host, resolver.values, env)
    }
}

/// First hop host of a `ProxyJump` value, for `%j`/`%C`.
fn jump_host(proxy_jump: &Option<Option<String>>) -> String {
    let Some(Some(jump)) = proxy_jump else {
        return String::new();
    };
    let hop = jump.split(',').next().unwrap_or_default();
    let hop = hop.strip_prefix("ssh://").unwrap_or(hop);
    let hop = hop.rsplit_once('@').map_or(hop, |(_, h)| h);
    let hop = match hop.strip_prefix('[') {
        Some(r) => r.split_once(']').map_or(r, |(h, _)| h),
        None => hop.split_once(':').map_or(hop, |(h, _)| h),
    };
    hop.to_string()
}

fn finish(alias: &str, v: Values, env: &Environment) -> Result<HostConfig, ConfigError> {
    let hostname = match &v.hostname {
        Some((h, origin)) => expand_tokens(h, &[('h', alias)], false)
            .map_err(|m| origin.error(format!("HostName {m}")))?,
        None => alias.to_string(),
    };
    let port = v.port.unwrap_or(22);
    let user = v.user.clone().unwrap_or_else(|| env.local_user.clone());

    let home = env
        .home
        .as_ref()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let port_s = port.to_string();
    let uid_s = env.uid.map(|u| u.to_string());
    let short_host = env
        .local_hostname
        .split('.')
        .next()
        .unwrap_or_default()
        .to_string();
    let jump = jump_host(&v.proxy_jump);
    let conn_hash = {
        let digest =
            Sha1::digest(format!("{}{hostname}{port}{user}{jump}", env.local_hostname).as_bytes());
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let key_alias = v
        .host_key_alias
        .clone()
        .unwrap_or_else(|| alias.to_string());
    let mut tokens: Vec<(char, &str)> = vec![
        ('C', &conn_hash),
        ('h', &hostname),
        ('j', &jump),
        ('k', &key_alias),
        ('L', &short_host),
        ('l', &env.local_hostname),
        ('n', alias),
        ('p', &port_s),
        ('r', &user),
        ('u', &env.local_user),
    ];
    if env.home.is_some() {
        tokens.push(('d', &home));
    }
    if let Some(uid) = &uid_s {
        tokens.push(('i', uid));
    }
    let expand_path = |raw: &str, origin: &Origin, what: &str| -> Result<PathBuf, ConfigError> {
        let tilded = expand_tilde(raw, env).map_err(|m| origin.error(format!("{what}: {m}")))?;
        expand_tokens(&tilded, &tokens, true)
            .map(PathBuf::from)
            .map_err(|m| origin.error(format!("{what} {m}")))
    };

    let identity_files_explicit = !v.identity_files.is_empty();
    let identity_files = if identity_files_explicit {
        v.identity_files
            .iter()
            .map(|(f, o)| expand_path(f, o, "IdentityFile"))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        default_in_home(env, &["id_ed25519", "id_ecdsa", "id_rsa"])
    };
    let certificate_files = v
        .certificate_files
        .iter()
        .map(|(f, o)| expand_path(f, o, "CertificateFile"))
        .collect::<Result<Vec<_>, _>>()?;
    let known_hosts = |list: &Option<(Vec<String>, Origin)>, what: &str| match list {
        Some((files, origin)) => files
            .iter()
            .filter(|f| !f.eq_ignore_ascii_case("none"))
            .map(|f| expand_path(f, origin, what))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        None => Ok(None),
    };
    let user_known_hosts_files = known_hosts(&v.user_known_hosts, "UserKnownHostsFile")?
        .unwrap_or_else(|| default_in_home(env, &["known_hosts", "known_hosts2"]));
    let global_known_hosts_files = known_hosts(&v.global_known_hosts, "GlobalKnownHostsFile")?
        .unwrap_or_else(|| {
            ["ssh_known_hosts", "ssh_known_hosts2"]
                .iter()
                .map(|f| Path::new(SYSTEM_CONFIG_DIR).join(f))
                .collect()
        });
    let revoked_host_keys = match &v.revoked_host_keys {
        Some((Some(f), origin)) => Some(expand_path(f, origin, "RevokedHostKeys")?),
        _ => None,
    };
    let identity_agent = match &v.identity_agent {
        Some((a, origin)) => {
            let special = a.eq_ignore_ascii_case("none")
                || a == "SSH_AUTH_SOCK"
                || (a.starts_with('$') && !a.starts_with("${"));
            if special {
                Some(a.clone())
            } else {
                Some(
                    expand_path(a, origin, "IdentityAgent")?
                        .to_string_lossy()
                        .into_owned(),
                )
            }
        }
        None => None,
    };

    Ok(HostConfig {
        host_alias: alias.to_string(),
        hostname,
        port,
        user,
        identity_files,
        identity_files_explicit,
        certificate_files,
        identities_only: v.identities_only.unwrap_or(false),
        user_known_hosts_files,
        global_known_hosts_files,
        strict_host_key_checking: v.strict.unwrap_or_default(),
        hash_known_hosts: v.hash_known_hosts.unwrap_or(false),
        host_key_alias: v.host_key_alias,
        revoked_host_keys,
        password_authentication: v.password_auth.unwrap_or(true),
        pubkey_authentication: v.pubkey_auth.unwrap_or(true),
        kbd_interactive_authentication: v.kbd_auth.unwrap_or(true),
        batch_mode: v.batch_mode.unwrap_or(false),
        identity_agent,
        connect_timeout: v.connect_timeout.flatten(),
        compression: v.compression.unwrap_or(false),
        rekey_limit: v.rekey_limit.and_then(|(b, _)| b),
        rekey_time: v.rekey_limit.and_then(|(_, t)| t),
        ciphers: v.ciphers,
        macs: v.macs,
        kex_algorithms: v.kex,
        host_key_algorithms: v.host_key_algorithms,
        preferred_authentications: v.preferred_auth,
        server_alive_interval: v.server_alive_interval.flatten(),
        server_alive_count_max: v.server_alive_count_max.unwrap_or(3),
        number_of_password_prompts: v.password_prompts.unwrap_or(3),
        proxy_jump: v.proxy_jump.flatten(),
        proxy_command: v.proxy_command.flatten(),
        ignored: v.ignored,
    })
}

fn default_in_home(env: &Environment, names: &[&str]) -> Vec<PathBuf> {
    match &env.home {
        Some(home) => names.iter().map(|n| home.join(".ssh").join(n)).collect(),
        // Without a home there is no sensible default; the caller sees none.
        None => Vec::new(),
    }
}

/// The configuration files `ssh` would read: only `explicit` (`-F`) when
/// given, which must exist (`-F none` reads nothing), else `~/.ssh/config`
/// then `/etc/ssh/ssh_config`, each optional.
pub fn standard_files(explicit: Option<&Path>) -> Result<Vec<SshConfig>, ConfigError> {
    standard_files_with(explicit, &Environment::from_process())
}

/// [`standard_files`] with an explicit environment.
pub fn standard_files_with(
    explicit: Option<&Path>,
    env: &Environment,
) -> Result<Vec<SshConfig>, ConfigError> {
    if let Some(path) = explicit {
        if path == Path::new("none") {
            return Ok(Vec::new());
        }
        // A -F file is user configuration whatever its location.
        return Ok(vec![SshConfig::load_with(path, ConfigKind::User, env)?]);
    }
    let mut files = Vec::new();
    if let Some(home) = &env.home {
        files.push(SshConfig::load_optional_with(
            &home.join(".ssh").join("config"),
            ConfigKind::User,
            env,
        )?);
    }
    files.push(SshConfig::load_optional_with(
        &Path::new(SYSTEM_CONFIG_DIR).join("ssh_config"),
        ConfigKind::System,
        env,
    )?);
    Ok(files)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
