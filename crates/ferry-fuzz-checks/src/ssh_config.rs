//! `ssh_config` files (ferry_ssh_config::config): parsed, then resolved for
//! a few hosts as `ferry cp` does, with the first line also given as a
//! `-o` override; and each line as a `ProxyJump` value. Inputs with
//! `Include` are skipped: it reads other files from disk, and a fuzz
//! target must not depend on (or wander through) the machine's files.
//! Nothing may panic.

use std::path::{Path, PathBuf};

use ferry_ssh_config::config::{ConfigKind, Environment, SshConfig};
use ferry_ssh_config::proxy::parse_jumps;

/// One input of the `ssh_config` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn ssh_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.to_ascii_lowercase().contains("include") {
        return;
    }
    let env = Environment {
        home: Some(PathBuf::from("/nonexistent/ferry-fuzz-home")),
        local_user: "fuzz".into(),
        local_hostname: "fuzzhost.example".into(),
        uid: Some(1000),
    };
    for line in text.lines() {
        let _ = parse_jumps(line);
    }
    let Ok(cfg) = SshConfig::parse_str_with(
        text,
        Path::new("/nonexistent/ferry-fuzz-home/.ssh/config"),
        ConfigKind::User,
        &env,
    ) else {
        return;
    };
    let overrides: Vec<String> = text.lines().take(1).map(str::to_string).collect();
    let files = [cfg];
    for host in ["example.test", "10.0.0.1", "[::1]", "alias"] {
        for o in [&overrides[..], &[]] {
            if let Ok(hc) = SshConfig::resolve_with(host, o, &files, &env) {
                let _ = hc.known_hosts_files();
                let _ = hc.proxy_command_line();
                let _ = hc.known_hosts_lookup();
            }
        }
    }
}
