//! Transcript tests for `config`: configuration text in, resolved
//! [`HostConfig`] out, with a fixed [`Environment`] (home in a temporary
//! directory, user "alice") so results do not depend on the machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

struct Home {
    dir: tempfile::TempDir,
    env: Environment,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let env = Environment {
            home: Some(dir.path().to_path_buf()),
            local_user: "alice".into(),
            local_hostname: "box.local".into(),
            uid: Some(1000),
        };
        Self { dir, env }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn parse(&self, text: &str) -> SshConfig {
        self.try_parse(text).unwrap()
    }

    fn try_parse(&self, text: &str) -> Result<SshConfig, ConfigError> {
        SshConfig::parse_str_with(text, &self.path(".ssh/config"), ConfigKind::User, &self.env)
    }

    fn resolve(&self, text: &str, host: &str) -> HostConfig {
        self.resolve_o(text, host, &[])
    }

    fn resolve_o(&self, text: &str, host: &str, overrides: &[&str]) -> HostConfig {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        SshConfig::resolve_with(host, &overrides, &[self.parse(text)], &self.env).unwrap()
    }

    fn ssh(&self, name: &str) -> PathBuf {
        self.dir.path().join(".ssh").join(name)
    }
}

#[test]
fn defaults_without_configuration() {
    let h = Home::new();
    let c = h.resolve("", "server");
    assert_eq!(c.host_alias, "server");
    assert_eq!(c.hostname, "server");
    assert_eq!(c.port, 22);
    assert_eq!(c.user, "alice");
    assert_eq!(
        c.identity_files,
        vec![h.ssh("id_ed25519"), h.ssh("id_ecdsa"), h.ssh("id_rsa")]
    );
    assert!(!c.identity_files_explicit);
    assert!(!c.identities_only);
    assert_eq!(
        c.user_known_hosts_files,
        vec![h.ssh("known_hosts"), h.ssh("known_hosts2")]
    );
    assert_eq!(
        c.global_known_hosts_files,
        vec![
            PathBuf::from("/etc/ssh/ssh_known_hosts"),
            PathBuf::from("/etc/ssh/ssh_known_hosts2")
        ]
    );
    assert_eq!(c.strict_host_key_checking, StrictHostKeyChecking::Ask);
    assert!(c.password_authentication);
    assert!(c.pubkey_authentication);
    assert!(c.kbd_interactive_authentication);
    assert!(!c.batch_mode);
    assert!(!c.compression);
    assert!(!c.hash_known_hosts);
    assert_eq!(c.identity_agent, None);
    assert_eq!(c.connect_timeout, None);
    assert_eq!(c.ciphers, None);
    assert_eq!(c.server_alive_interval, None);
    assert_eq!(c.server_alive_count_max, 3);
    assert_eq!(c.proxy_jump, None);
    assert!(c.ignored.is_empty());
    assert_eq!(c.known_hosts_lookup(), ("server".to_string(), 22));
}

const LAYERED: &str = "\
# Specific first, general last: the usual ssh_config layout.
Host web
    HostName web.internal.example
    Port 2222
    User deploy
    IdentityFile ~/.ssh/web_key

Host *.example.com web
    User generic
    Port 2200
    IdentityFile ~/.ssh/example_key
    Compression yes

Host *
    User nobody
    IdentityFile ~/.ssh/id_ed25519
    ServerAliveInterval 30
";

#[test]
fn first_obtained_value_wins_identity_files_accumulate() {
    let h = Home::new();
    let c = h.resolve(LAYERED, "web");
    assert_eq!(c.hostname, "web.internal.example");
    assert_eq!(c.port, 2222);
    assert_eq!(c.user, "deploy");
    assert_eq!(
        c.identity_files,
        vec![h.ssh("web_key"), h.ssh("example_key"), h.ssh("id_ed25519")]
    );
    assert!(c.identity_files_explicit);
    assert!(c.compression);
    assert_eq!(c.server_alive_interval, Some(Duration::from_secs(30)));

    let c = h.resolve(LAYERED, "db.example.com");
    assert_eq!(c.hostname, "db.example.com");
    assert_eq!(c.port, 2200);
    assert_eq!(c.user, "generic");
    assert_eq!(
        c.identity_files,
        vec![h.ssh("example_key"), h.ssh("id_ed25519")]
    );

    let c = h.resolve(LAYERED, "other");
    assert_eq!(c.port, 22);
    assert_eq!(c.user, "nobody");
    assert!(!c.compression);
}

#[test]
fn overrides_come_first_in_both_syntaxes() {
    let h = Home::new();
    let c = h.resolve_o(
        LAYERED,
        "web",
        &[
            "Port=2022",
            "user root",
            "IdentityFile = /keys/cli",
            "StrictHostKeyChecking=accept-new",
        ],
    );
    assert_eq!(c.port, 2022);
    assert_eq!(c.user, "root");
    assert_eq!(
        c.identity_files,
        vec![
            PathBuf::from("/keys/cli"),
            h.ssh("web_key"),
            h.ssh("example_key"),
            h.ssh("id_ed25519")
        ]
    );
    assert_eq!(c.strict_host_key_checking, StrictHostKeyChecking::AcceptNew);
    // Still from the file: the override did not set it.
    assert_eq!(c.hostname, "web.internal.example");
}

#[test]
fn later_files_only_fill_in() {
    let h = Home::new();
    let user = h.parse("Host *\n  User fromuser\n");
    let system = SshConfig::parse_str_with(
        "Host *\n  User fromsystem\n  Port 2020\n",
        Path::new("/etc/ssh/ssh_config"),
        ConfigKind::System,
        &h.env,
    )
    .unwrap();
    let c = SshConfig::resolve_with("x", &[], &[user, system], &h.env).unwrap();
    assert_eq!(c.user, "fromuser");
    assert_eq!(c.port, 2020);
}

#[test]
fn wildcards_and_negated_patterns() {
    let h = Home::new();
    let text = "\
Host *.corp !bastion.corp
    User employee
Host node?? 
    Port 1001
Host *
    User outsider
";
    assert_eq!(h.resolve(text, "mail.corp").user, "employee");
    assert_eq!(h.resolve(text, "bastion.corp").user, "outsider");
    assert_eq!(h.resolve(text, "MAIL.CORP").user, "employee");
    assert_eq!(h.resolve(text, "node42").port, 1001);
    assert_eq!(h.resolve(text, "node4").port, 22);
    assert_eq!(h.resolve(text, "node123").port, 22);
    // A block with only negated patterns never matches anything.
    let c = h.resolve("Host !foo\n  Port 9\n", "bar");
    assert_eq!(c.port, 22);
}

#[test]
fn line_syntax_variants() {
    let h = Home::new();
    let text = "\r
# comment\r
   # indented comment\r
\r
HOST\tquoting\r
\tHostName=target.example\r
  PORT = 2345\r
  user \"john smith\"\r
  IdentityFile \"~/.ssh/key with spaces\" # trailing comment\r
  IdentityFile ~/.ssh/escaped\\ space\r
  ciphers 'aes128-ctr,aes256-ctr'\r
  BatchMode=yes\r
  PasswordAuthentication false\r
  PubkeyAuthentication TRUE\r
  IdentitiesOnly yes\r
  ProxyCommand ssh -W %h:%p gateway # kept verbatim\r
";
    let c = h.resolve(text, "quoting");
    assert_eq!(c.hostname, "target.example");
    assert_eq!(c.port, 2345);
    assert_eq!(c.user, "john smith");
    assert_eq!(
        c.identity_files,
        vec![h.ssh("key with spaces"), h.ssh("escaped space")]
    );
    assert_eq!(c.ciphers.as_deref(), Some("aes128-ctr,aes256-ctr"));
    assert!(c.batch_mode);
    assert!(!c.password_authentication);
    assert!(c.pubkey_authentication);
    assert!(c.identities_only);
    assert_eq!(
        c.proxy_command.as_deref(),
        Some("ssh -W %h:%p gateway # kept verbatim")
    );
}

#[test]
fn split_args_follows_openssh() {
    assert_eq!(split_args("a b\t c").unwrap(), ["a", "b", "c"]);
    assert_eq!(split_args("\"a b\" 'c d'").unwrap(), ["a b", "c d"]);
    assert_eq!(split_args("x\"y z\"w").unwrap(), ["xy zw"]);
    assert_eq!(split_args("a\\\"b").unwrap(), ["a\"b"]);
    assert_eq!(split_args("a\\nb").unwrap(), ["a\\nb"]);
    assert_eq!(split_args("a #b c").unwrap(), ["a"]);
    assert_eq!(split_args("a#b").unwrap(), ["a#b"]);
    assert_eq!(split_args("\"#x\"").unwrap(), ["#x"]);
    assert_eq!(split_args("\"\"").unwrap(), [""]);
    assert!(split_args("\"open").is_err());
}

#[test]
fn hostname_and_path_tokens() {
    let h = Home::new();
    let text = "\
Host *
    HostName %h.internal.example
    User bob
    Port 2200
    IdentityFile %d/keys/%u-%r@%h:%p
    IdentityFile ~/keys/%n-%l-%L-%i-100%%
    CertificateFile ~/.ssh/%k-cert.pub
    UserKnownHostsFile ~/.ssh/kh_%h /abs/known none
    GlobalKnownHostsFile /etc/kh1 /etc/kh2
    IdentityAgent ~/agent.%u.sock
";
    let c = h.resolve(text, "web");
    assert_eq!(c.hostname, "web.internal.example");
    let home = h.dir.path().display().to_string();
    assert_eq!(
        c.identity_files,
        vec![
            PathBuf::from(format!("{home}/keys/alice-bob@web.internal.example:2200")),
            PathBuf::from(format!("{home}/keys/web-box.local-box-1000-100%")),
        ]
    );
    assert_eq!(c.certificate_files, vec![h.ssh("web-cert.pub")]);
    assert_eq!(
        c.user_known_hosts_files,
        vec![
            h.ssh("kh_web.internal.example"),
            PathBuf::from("/abs/known")
        ]
    );
    assert_eq!(
        c.global_known_hosts_files,
        vec![PathBuf::from("/etc/kh1"), PathBuf::from("/etc/kh2")]
    );
    assert_eq!(c.identity_agent, Some(format!("{home}/agent.alice.sock")));
    assert_eq!(c.known_hosts_files().len(), 4);
}

#[test]
fn connection_hash_token() {
    let h = Home::new();
    let c = h.resolve("IdentityFile /k/%C\nUser u\n", "srv");
    // sha1("box.local" "srv" "22" "u")
    let expected: String = Sha1::digest(b"box.localsrv22u")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        c.identity_files,
        vec![PathBuf::from(format!("/k/{expected}"))]
    );
}

#[test]
fn token_errors_name_the_line() {
    let h = Home::new();
    let cfg = h.parse("Host *\n  IdentityFile ~/.ssh/%Z\n");
    let err = SshConfig::resolve_with("x", &[], &[cfg], &h.env).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(".ssh/config:2:"), "{msg}");
    assert!(msg.contains("%Z"), "{msg}");

    let cfg = h.parse("IdentityFile /k/${FERRY_TEST_SURELY_UNSET_VARIABLE}\n");
    let msg = SshConfig::resolve_with("x", &[], &[cfg], &h.env)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(":1:") && msg.contains("FERRY_TEST_SURELY_UNSET_VARIABLE"),
        "{msg}"
    );
}

#[test]
fn identity_agent_special_values_kept_verbatim() {
    let h = Home::new();
    for v in ["none", "SSH_AUTH_SOCK", "$MY_AGENT"] {
        let c = h.resolve(&format!("IdentityAgent {v}\n"), "x");
        assert_eq!(c.identity_agent.as_deref(), Some(v));
    }
}

#[test]
fn value_parsing() {
    let h = Home::new();
    let strict = |v: &str| {
        h.resolve(&format!("StrictHostKeyChecking {v}\n"), "x")
            .strict_host_key_checking
    };
    assert_eq!(strict("yes"), StrictHostKeyChecking::Yes);
    assert_eq!(strict("no"), StrictHostKeyChecking::No);
    assert_eq!(strict("off"), StrictHostKeyChecking::No);
    assert_eq!(strict("accept-new"), StrictHostKeyChecking::AcceptNew);
    assert_eq!(strict("ASK"), StrictHostKeyChecking::Ask);

    let timeout = |v: &str| {
        h.resolve(&format!("ConnectTimeout {v}\n"), "x")
            .connect_timeout
    };
    assert_eq!(timeout("10"), Some(Duration::from_secs(10)));
    assert_eq!(timeout("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(timeout("2H"), Some(Duration::from_secs(7200)));
    assert_eq!(timeout("0"), None);
    assert_eq!(timeout("none"), None);
    for bad in ["ten", "10x", "m", "99999999999999999999"] {
        assert!(
            h.try_parse(&format!("ConnectTimeout {bad}\n")).is_err(),
            "{bad}"
        );
    }

    let c = h.resolve(
        "ServerAliveInterval 0\nServerAliveCountMax 7\nHashKnownHosts yes\nPubkeyAuthentication host-bound\nProxyJump none\nHostKeyAlias alias.example\nKexAlgorithms +diffie-hellman-group14-sha1\nMACs hmac-sha2-256\nHostKeyAlgorithms ssh-ed25519\nPreferredAuthentications publickey\nNumberOfPasswordPrompts 1\nKbdInteractiveAuthentication no\n",
        "x",
    );
    assert_eq!(c.server_alive_interval, None);
    assert_eq!(c.server_alive_count_max, 7);
    assert!(c.hash_known_hosts);
    assert!(c.pubkey_authentication);
    assert_eq!(c.proxy_jump, None);
    assert_eq!(c.host_key_alias.as_deref(), Some("alias.example"));
    assert_eq!(c.known_hosts_lookup(), ("alias.example".to_string(), 22));
    assert_eq!(
        c.kex_algorithms.as_deref(),
        Some("+diffie-hellman-group14-sha1")
    );
    assert_eq!(c.macs.as_deref(), Some("hmac-sha2-256"));
    assert_eq!(c.host_key_algorithms.as_deref(), Some("ssh-ed25519"));
    assert_eq!(c.preferred_authentications.as_deref(), Some("publickey"));
    assert_eq!(c.number_of_password_prompts, 1);
    assert!(!c.kbd_interactive_authentication);

    // RevokedHostKeys: first one wins, `~` expands, `none` means none.
    let c = h.resolve(
        "RevokedHostKeys ~/.ssh/revoked\nRevokedHostKeys /etc/other\n",
        "x",
    );
    assert_eq!(c.revoked_host_keys, Some(h.path(".ssh/revoked")));
    assert!(!c.ignored.contains(&"revokedhostkeys".to_string()));
    assert_eq!(
        h.resolve("RevokedHostKeys none\n", "x").revoked_host_keys,
        None
    );
    assert_eq!(h.resolve("", "x").revoked_host_keys, None);

    let c = h.resolve("Port 2222\nProxyJump jump@gw:22\n", "x");
    assert_eq!(c.known_hosts_lookup(), ("x".to_string(), 2222));
    assert_eq!(c.proxy_jump.as_deref(), Some("jump@gw:22"));
}

#[test]
fn unknown_keywords_are_ignored_but_reported() {
    let h = Home::new();
    let text = "\
SomeFutureOption yes
ForwardAgent yes
Host other
    OnlyForOther 1
Host *
    ForwardAgent no
    LogLevel DEBUG
";
    let c = h.resolve(text, "x");
    assert_eq!(c.ignored, ["somefutureoption", "forwardagent", "loglevel"]);
}

#[test]
fn match_blocks() {
    let h = Home::new();
    let text = "\
Host short
    HostName long.example.net
Match originalhost short user alice
    Port 1111
Match host *.example.net
    User matched-by-hostname
Match exec \"true\"
    Port 9999
Match !host *.example.net
    Compression yes
Match localuser alice,!bob
    ConnectTimeout 5
Match user alice
    IdentitiesOnly yes
Match all
    BatchMode yes
";
    let c = h.resolve(text, "short");
    assert_eq!(c.hostname, "long.example.net");
    assert_eq!(c.port, 1111);
    // `Match host` sees the HostName set earlier.
    assert_eq!(c.user, "matched-by-hostname");
    // exec is not evaluated: block skipped, no error.
    assert!(!c.compression);
    assert_eq!(c.connect_timeout, Some(Duration::from_secs(5)));
    // `Match user` sees the user chosen so far (not alice any more).
    assert!(!c.identities_only);
    assert!(c.batch_mode);

    let c = h.resolve(text, "elsewhere");
    assert_eq!(c.port, 22);
    assert_eq!(c.user, "alice");
    assert!(c.compression);
    assert!(c.identities_only);
    assert!(c.batch_mode);
}

#[test]
fn match_with_unsupported_criteria_never_applies() {
    let h = Home::new();
    for criteria in [
        "exec true",
        "!exec false",
        "localnetwork 10.0.0.0/8",
        "tagged foo",
        "somethingnew arg",
        "host * exec true",
    ] {
        let c = h.resolve(&format!("Match {criteria}\n  Port 5\n"), "x");
        assert_eq!(c.port, 22, "{criteria}");
    }
}

#[test]
fn match_final_is_a_second_pass_that_only_fills_in() {
    let h = Home::new();
    let text = "\
Match final
    User final-user
    Port 7000
Host x
    Port 22022
";
    let c = h.resolve(text, "x");
    assert_eq!(c.port, 22022);
    assert_eq!(c.user, "final-user");
    let c = h.resolve("Match canonical\n  Port 7\n", "x");
    assert_eq!(c.port, 7);
}

#[test]
fn match_syntax_errors() {
    let h = Home::new();
    for (text, needle) in [
        ("Match host\n", "missing argument"),
        ("Match all host x\n", "Match all"),
        ("Match\n", "no argument"),
        ("Match user=\n", ""),
    ] {
        match h.try_parse(text) {
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(".ssh/config:1:") && msg.contains(needle),
                    "{msg}"
                );
            }
            Ok(_) if needle.is_empty() => {}
            Ok(_) => panic!("{text:?} parsed"),
        }
    }
    assert!(h.try_parse("Match host=a,b user=c\n  Port 1\n").is_ok());
}

#[test]
fn errors_name_file_and_line() {
    let h = Home::new();
    let cases = [
        ("Host a\n  Port 22\n  Port eighty\n", 3, "bad port"),
        ("Port 0\n", 1, "bad port"),
        ("Port 65536\n", 1, "bad port"),
        // Checked even though the block does not apply to the host.
        ("Host never\n\n  Compression maybe\n", 3, "yes or no"),
        ("User \"unterminated\n", 1, "unterminated"),
        ("Host\n", 1, "no argument"),
        ("HostName\n", 1, "no argument"),
        ("HostName # only a comment\n", 1, "no argument"),
        ("User two words\n", 1, "one argument"),
        ("StrictHostKeyChecking sometimes\n", 1, "accept-new"),
        ("=value\n", 1, "keyword"),
    ];
    for (text, line, needle) in cases {
        let err = h.try_parse(text).unwrap_err();
        match &err {
            ConfigError::Syntax { path, line: l, .. } => {
                assert_eq!(path, &h.path(".ssh/config"));
                assert_eq!(*l, line, "{text:?}");
            }
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("{}:{line}: ", h.path(".ssh/config").display())),
            "{msg}"
        );
        assert!(msg.contains(needle), "{text:?}: {msg}");
    }
}

#[test]
fn override_errors_name_the_option() {
    let h = Home::new();
    let run = |o: &str| {
        SshConfig::resolve_with("x", &[o.to_string()], &[], &h.env)
            .unwrap_err()
            .to_string()
    };
    let msg = run("Port=abc");
    assert_eq!(
        msg,
        "command-line option \"-o Port=abc\": bad port \"abc\" (expected 1-65535)"
    );
    assert!(run("Host foo").contains("not allowed"));
    assert!(run("Include /x").contains("not allowed"));
    assert!(run("").contains("empty"));
    assert!(run("BatchMode").contains("no argument"));
}

#[test]
fn include_with_globs_relative_to_dot_ssh() {
    let h = Home::new();
    h.write(
        ".ssh/config.d/10-web.conf",
        "Host web\n    HostName web.from-include\n    Port 2001\n",
    );
    h.write(".ssh/config.d/20-all.conf", "Port 2002\nUser included\n");
    h.write(".ssh/config.d/.hidden.conf", "Port 6666\n");
    h.write(".ssh/config.d/README", "Port 7777\n");
    h.write(".ssh/config.d/sub.conf/keep", "");
    h.write(".ssh/extra", "Compression yes\n");
    let text = "\
Include config.d/*.conf ~/.ssh/extra config.d/nothing-matches-*
Include /nonexistent/dir/*
Host *
    Port 22
    User fallback
";
    let c = h.resolve(text, "web");
    assert_eq!(c.hostname, "web.from-include");
    assert_eq!(c.port, 2001);
    // 20-all.conf's `Port` is not under a Host line, but the `Host web` in
    // 10-web.conf ended when that file did.
    assert_eq!(c.user, "included");
    assert!(c.compression);
    let c = h.resolve(text, "other");
    assert_eq!(c.port, 2002);
    assert_eq!(c.user, "included");
}

#[test]
fn include_inside_an_inactive_block_stays_inactive() {
    let h = Home::new();
    h.write(
        ".ssh/inner",
        "Port 1234\nHost *\n    User inner-star\nMatch all\n    Compression yes\n",
    );
    let text = "\
Host special
    Include inner
    IdentitiesOnly yes
";
    let c = h.resolve(text, "special");
    assert_eq!(c.port, 1234);
    assert_eq!(c.user, "inner-star");
    assert!(c.compression);
    // Back in the outer `Host special` block after the include.
    assert!(c.identities_only);

    let c = h.resolve(text, "other");
    assert_eq!(c.port, 22);
    assert_eq!(c.user, "alice");
    assert!(!c.compression);
    assert!(!c.identities_only);
}

#[test]
fn include_loops_stop_with_an_error() {
    let h = Home::new();
    h.write(".ssh/loop", "# loops\nInclude loop\n");
    let err = h.try_parse("Include loop\n").unwrap_err().to_string();
    assert!(err.contains("too deeply"), "{err}");
    assert!(
        err.contains(&format!("{}:2:", h.ssh("loop").display())),
        "{err}"
    );
}

#[test]
fn include_errors_inside_included_files_name_that_file() {
    let h = Home::new();
    h.write(".ssh/bad", "\n\nPort nope\n");
    let err = h.try_parse("Include bad\n").unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:3:", h.ssh("bad").display())),
        "{err}"
    );
}

#[test]
fn system_includes_are_relative_to_etc_ssh() {
    let h = Home::new();
    let parser = Parser {
        kind: ConfigKind::System,
        env: &h.env,
    };
    assert_eq!(
        parser.include_path("ssh_config.d/*.conf").unwrap(),
        PathBuf::from("/etc/ssh/ssh_config.d/*.conf")
    );
    let parser = Parser {
        kind: ConfigKind::User,
        env: &h.env,
    };
    assert_eq!(parser.include_path("x").unwrap(), h.ssh("x"));
    assert_eq!(parser.include_path("/abs").unwrap(), PathBuf::from("/abs"));
    assert_eq!(
        ConfigKind::for_path(Path::new("/etc/ssh/ssh_config")),
        ConfigKind::System
    );
    assert_eq!(ConfigKind::for_path(&h.ssh("config")), ConfigKind::User);
}

#[test]
fn loading_files() {
    let h = Home::new();
    let missing = h.path("missing");
    assert!(matches!(
        SshConfig::load_with(&missing, ConfigKind::User, &h.env),
        Err(ConfigError::Io { .. })
    ));
    let empty = SshConfig::load_optional_with(&missing, ConfigKind::User, &h.env).unwrap();
    assert_eq!(empty.origin(), missing);
    let file = h.write("f", "Port 42\n");
    let cfg = SshConfig::load(&file).unwrap();
    let c = SshConfig::resolve_with("x", &[], &[cfg], &h.env).unwrap();
    assert_eq!(c.port, 42);
}

#[test]
fn standard_file_selection() {
    let h = Home::new();
    let missing = h.path("nope");
    let err = standard_files_with(Some(&missing), &h.env).unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
    assert!(standard_files_with(Some(Path::new("none")), &h.env)
        .unwrap()
        .is_empty());

    h.write(".ssh/config", "Host *\n  Port 4242\n");
    let files = standard_files_with(None, &h.env).unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].origin(), h.ssh("config"));
    assert_eq!(files[1].origin(), Path::new("/etc/ssh/ssh_config"));
    let c = SshConfig::resolve_with("x", &[], &files[..1], &h.env).unwrap();
    assert_eq!(c.port, 4242);

    let explicit = h.write("custom", "Port 4343\nInclude rel\n");
    h.write(".ssh/rel", "User from-rel\n");
    let files = standard_files_with(Some(&explicit), &h.env).unwrap();
    let c = SshConfig::resolve_with("x", &[], &files, &h.env).unwrap();
    assert_eq!((c.port, c.user.as_str()), (4343, "from-rel"));
}

#[test]
fn tilde_forms() {
    let h = Home::new();
    let home = h.dir.path().display().to_string();
    assert_eq!(expand_tilde("~", &h.env).unwrap(), home);
    assert_eq!(expand_tilde("~/x", &h.env).unwrap(), format!("{home}/x"));
    assert_eq!(
        expand_tilde("~alice/x", &h.env).unwrap(),
        format!("{home}/x")
    );
    assert_eq!(expand_tilde("/a/~b", &h.env).unwrap(), "/a/~b");
    assert!(expand_tilde("~no-such-user-ferry/x", &h.env).is_err());
    let nohome = Environment {
        home: None,
        ..h.env.clone()
    };
    assert!(expand_tilde("~/x", &nohome).is_err());
    // No home: no default identities or user known_hosts, but no failure.
    let c = SshConfig::resolve_with("x", &[], &[], &nohome).unwrap();
    assert!(c.identity_files.is_empty());
    assert!(c.user_known_hosts_files.is_empty());
}

/// The only test that touches the process environment: `resolve` must take
/// `~` from `$HOME` so that callers' tests can redirect it.
#[test]
fn process_environment_uses_home_variable() {
    let h = Home::new();
    let old = std::env::var_os("HOME");
    std::env::set_var("HOME", h.dir.path());
    let result = SshConfig::resolve("x", &["IdentityFile=~/k".to_string()], &[]);
    match old {
        Some(v) => std::env::set_var("HOME", v),
        None => std::env::remove_var("HOME"),
    }
    let c = result.unwrap();
    assert_eq!(c.identity_files, vec![h.path("k")]);
    assert_eq!(c.user_known_hosts_files[0], h.ssh("known_hosts"));
}

/// Expected values are what `ssh -G -F cfg HOST` (OpenSSH 9.2) printed for
/// this configuration, run as the local user the test calls alice.
#[test]
fn agrees_with_ssh_dash_g() {
    let h = Home::new();
    h.write(".ssh/inner", "Port 1234\nHost *\n    User inner-star\n");
    let text = "\
Host short
    HostName long.example.net
    Include inner
    IdentitiesOnly yes
Match originalhost short user alice
    Port 1111
Match host *.example.net
    User matched-by-hostname
Match user alice
    Compression yes
Match final
    ConnectTimeout 7
    Port 7000
Host *.corp !bastion.corp
    User employee
";
    let row = |host: &str| {
        let c = h.resolve(text, host);
        (
            c.user,
            c.hostname,
            c.port,
            c.compression,
            c.identities_only,
            c.connect_timeout.map(|d| d.as_secs()),
        )
    };
    let s = |v: &str| v.to_string();
    assert_eq!(
        row("short"),
        (
            s("inner-star"),
            s("long.example.net"),
            1234,
            false,
            true,
            Some(7)
        )
    );
    assert_eq!(
        row("other"),
        (s("alice"), s("other"), 7000, true, false, Some(7))
    );
    assert_eq!(
        row("bastion.corp"),
        (s("alice"), s("bastion.corp"), 7000, true, false, Some(7))
    );
    assert_eq!(
        row("mail.corp"),
        (s("employee"), s("mail.corp"), 7000, true, false, Some(7))
    );
}

#[test]
fn proxy_jump_and_proxy_command_first_one_wins() {
    let h = Home::new();
    let text = "Host a\n  ProxyJump gw\nHost b\n  ProxyCommand nc %h %p\nHost *\n  ProxyJump late\n  ProxyCommand late\n";
    let c = h.resolve(text, "a");
    assert_eq!(c.proxy_jump.as_deref(), Some("gw"));
    assert_eq!(c.proxy_command, None);
    let c = h.resolve(text, "b");
    assert_eq!(c.proxy_jump, None);
    assert_eq!(c.proxy_command.as_deref(), Some("nc %h %p"));
    // `none` counts as the first one: it blocks both.
    let c = h.resolve(&format!("Host n\n  ProxyJump none\n{text}"), "n");
    assert_eq!((c.proxy_jump, c.proxy_command), (None, None));
    let c = h.resolve(&format!("Host n\n  ProxyCommand none\n{text}"), "n");
    assert_eq!((c.proxy_jump, c.proxy_command), (None, None));
    // -J (passed as an override) beats a ProxyCommand in the file.
    let c = h.resolve_o(text, "b", &["ProxyJump=j1,j2"]);
    assert_eq!(c.proxy_jump.as_deref(), Some("j1,j2"));
    assert_eq!(c.proxy_command, None);
}

#[test]
fn proxy_command_tokens() {
    let h = Home::new();
    let c = h.resolve(
        "Host alias\n  HostName real.example\n  Port 2200\n  User bob\n  ProxyCommand nc %h %p # %r %n 100%%\n",
        "alias",
    );
    assert_eq!(
        c.proxy_command_line().unwrap().as_deref(),
        Some("nc real.example 2200 # bob alias 100%")
    );
    let c = h.resolve("ProxyCommand nc %h %z\n", "x");
    assert!(c.proxy_command_line().unwrap_err().contains("%z"));
    let c = h.resolve("Port 22\n", "x");
    assert_eq!(c.proxy_command_line().unwrap(), None);
}

/// `RekeyLimit` (issue 21: a rekey in the middle of a compressed transfer
/// is tested with `-o RekeyLimit=...` against ferry serve).
#[test]
fn rekey_limit_sizes_and_times() {
    let h = Home::new();
    let c = h.resolve("", "x");
    assert_eq!((c.rekey_limit, c.rekey_time), (None, None));
    let c = h.resolve("RekeyLimit 4M 30s\n", "x");
    assert_eq!(c.rekey_limit, Some(4 << 20));
    assert_eq!(c.rekey_time, Some(Duration::from_secs(30)));
    let c = h.resolve_o("", "x", &["RekeyLimit=1G"]);
    assert_eq!((c.rekey_limit, c.rekey_time), (Some(1 << 30), None));
    let c = h.resolve("RekeyLimit default none\n", "x");
    assert_eq!((c.rekey_limit, c.rekey_time), (None, None));
    let c = h.resolve("RekeyLimit 500\n", "x");
    assert_eq!(c.rekey_limit, Some(500));
    for bad in [
        "RekeyLimit 4X\n",
        "RekeyLimit 8\n",
        "RekeyLimit\n",
        "RekeyLimit 99999999999G\n",
    ] {
        assert!(h.try_parse(bad).is_err(), "{bad:?} accepted");
    }
}
