//! `ferry serve` started as a real process on 127.0.0.1 port 0, with its
//! own served root, state directory and client key in a temporary
//! directory; its banner parsed; killed by PID when dropped. FTP is on
//! when the arguments have `--ftp ADDR` ([`FerryServe::start_ftp`]).
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tempfile::TempDir;

use super::{ferry_bin, ferry_in, keygen, pub_path, tempdir, Tmpfs};

pub struct FerryServe {
    /// Served instead of `dir/root` ([`FerryServe::start_on_tmpfs`]).
    tmpfs: Option<Tmpfs>,
    /// The address it listens on (127.0.0.1, or the server side of a
    /// packet-level link: [`FerryServe::start_in_netns`]), and the
    /// network namespace it runs in.
    host: String,
    netns: Option<String>,
    dir: TempDir,
    child: Option<Child>,
    pub sftp_port: Option<u16>,
    pub https_port: Option<u16>,
    pub http_port: Option<u16>,
    pub ftp_port: Option<u16>,
    pub hostkey_line: String,
    pub hostkey_fp: String,
    pub cert_sha256: String,
    pub token: String,
    pub banner: String,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

fn port_of(v: &str) -> Option<u16> {
    v.rsplit(':').next()?.parse().ok()
}

impl FerryServe {
    /// `ferry serve ROOT --sftp 127.0.0.1:0 --https 127.0.0.1:0 ARGS...`
    /// with a fresh root, state dir and an authorized client key.
    pub fn start(args: &[&str]) -> FerryServe {
        FerryServe::start_at(None, args)
    }

    /// [`FerryServe::start`] serving a fresh tmpfs of `size` (e.g. "64m")
    /// instead: ferry serve reads and writes such files on the session's
    /// thread. `None` (reason printed) when no tmpfs can be mounted.
    pub fn start_on_tmpfs(size: &str, args: &[&str]) -> Option<FerryServe> {
        let t = Tmpfs::mount(size)?;
        Some(FerryServe::start_at(Some(t), args))
    }

    /// [`FerryServe::start`] inside network namespace `netns` (the server
    /// side of a `ferry_linkem::net::NetLink`), listening on `host`.
    pub fn start_in_netns(netns: &str, host: &str, args: &[&str]) -> FerryServe {
        FerryServe::start_where(None, Some(netns.to_string()), host, args)
    }

    fn start_at(tmpfs: Option<Tmpfs>, args: &[&str]) -> FerryServe {
        FerryServe::start_where(tmpfs, None, "127.0.0.1", args)
    }

    fn start_where(
        tmpfs: Option<Tmpfs>,
        netns: Option<String>,
        host: &str,
        args: &[&str],
    ) -> FerryServe {
        let dir = tempdir();
        let d = dir.path();
        for sub in ["root", "state", "keys", "home"] {
            fs::create_dir(d.join(sub)).unwrap_or_else(|e| panic!("mkdir {sub}: {e}"));
        }
        keygen(&d.join("keys/id"), "ed25519", None, "");
        keygen(&d.join("keys/other"), "ed25519", None, "");
        fs::copy(pub_path(&d.join("keys/id")), d.join("keys/authorized_keys"))
            .unwrap_or_else(|e| panic!("authorized_keys: {e}"));
        let mut s = FerryServe {
            tmpfs,
            host: host.to_string(),
            netns,
            dir,
            child: None,
            sftp_port: None,
            https_port: None,
            http_port: None,
            ftp_port: None,
            hostkey_line: String::new(),
            hostkey_fp: String::new(),
            cert_sha256: String::new(),
            token: String::new(),
            banner: String::new(),
            stdout: None,
            stderr: None,
        };
        let any = format!("{host}:0");
        s.launch(args, &any, &any);
        s
    }

    fn launch(&mut self, args: &[&str], sftp: &str, https: &str) {
        let d = self.dir.path();
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, ferry_bin()]);
                c
            }
            None => Command::new(ferry_bin()),
        };
        cmd.arg("serve")
            .arg(self.root())
            .args(["--sftp", sftp, "--https", https, "--state-dir"])
            .arg(d.join("state"))
            .arg("--authorized-keys")
            .arg(d.join("keys/authorized_keys"))
            .args(args)
            .env("HOME", d.join("home"))
            .env("FERRY_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start ferry serve: {e}"));
        let (tx, rx) = mpsc::channel::<String>();
        let out = child.stdout.take();
        let stdout = thread::spawn(move || {
            let mut all = String::new();
            if let Some(out) = out {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    all.push_str(&line);
                    all.push('\n');
                    let _ = tx.send(line);
                }
            }
            all
        });
        let err = child.stderr.take();
        let stderr = thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut e) = err {
                let _ = e.read_to_end(&mut buf);
            }
            buf
        });
        self.child = Some(child);
        self.stdout = Some(stdout);
        self.stderr = Some(stderr);
        self.banner.clear();
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    self.banner.push_str(&line);
                    self.banner.push('\n');
                    let (k, v) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                    match k {
                        "sftp" => self.sftp_port = port_of(v),
                        "https" => self.https_port = port_of(v),
                        "http" => self.http_port = port_of(v),
                        "ftp" => self.ftp_port = port_of(v),
                        "hostkey" => self.hostkey_fp = v.to_string(),
                        "hostkey-line" => self.hostkey_line = v.to_string(),
                        "cert" => self.cert_sha256 = v.trim_start_matches("sha256:").to_string(),
                        "token" => self.token = v.to_string(),
                        "ready" => break,
                        _ => {}
                    }
                }
                Err(_) => {
                    let o = self.stop_kill();
                    panic!(
                        "ferry serve did not print `ready`\n--- stdout ---\n{}\n--- stderr ---\n{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
        }
        if let Some(p) = self.sftp_port {
            fs::write(
                d.join("keys/known_hosts"),
                format!("[{}]:{p} {}\n", self.host, self.hostkey_line),
            )
            .unwrap_or_else(|e| panic!("known_hosts: {e}"));
        }
    }

    /// [`FerryServe::start`] with FTP on 127.0.0.1 port 0 too.
    pub fn start_ftp(args: &[&str]) -> FerryServe {
        let mut all = vec!["--ftp", "127.0.0.1:0"];
        all.extend_from_slice(args);
        FerryServe::start(&all)
    }

    /// Kill and start again on the same root, state and ports (clients'
    /// resume records name the port).
    pub fn restart(&mut self, args: &[&str]) {
        let _ = self.stop_kill();
        let sftp = format!("{}:{}", self.host, self.sftp_port.unwrap_or(0));
        let https = format!("{}:{}", self.host, self.https_port.unwrap_or(0));
        self.launch(args, &sftp, &https);
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    pub fn root(&self) -> PathBuf {
        match &self.tmpfs {
            Some(t) => t.path().to_path_buf(),
            None => self.dir.path().join("root"),
        }
    }
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("keys/id")
    }
    pub fn other_key(&self) -> PathBuf {
        self.dir.path().join("keys/other")
    }
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("keys/known_hosts")
    }
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// `sftp://127.0.0.1:PORT/path`
    pub fn url(&self, path: &str) -> String {
        format!(
            "sftp://{}:{}/{}",
            self.host,
            self.sftp_port.unwrap_or(0),
            path.trim_start_matches('/')
        )
    }

    /// `https://127.0.0.1:PORT/path`
    pub fn https_url(&self, path: &str) -> String {
        format!(
            "https://{}:{}/{}",
            self.host,
            self.https_port.unwrap_or(0),
            path.trim_start_matches('/')
        )
    }

    /// `ftp://HOST:PORT/path` (the path as given: percent-encode it).
    pub fn ftp_url(&self, path: &str) -> String {
        format!(
            "ftp://{}:{}/{}",
            self.host,
            self.ftp_port.unwrap_or(0),
            path.trim_start_matches('/')
        )
    }

    /// `--ssl-reqd --pin sha256:CERT -u ferry:TOKEN`: FTPS to this
    /// server with the token as the password.
    pub fn ftps_login(&self) -> Vec<OsString> {
        args![
            "--ssl-reqd",
            "--pin",
            format!("sha256:{}", self.cert_sha256),
            "-u",
            format!("ferry:{}", self.token),
        ]
    }

    /// `ferry cp -q` [`FerryServe::ftps_login`] `ARGS...`.
    pub fn ftp_cp(&self, args: &[OsString]) -> Output {
        let mut all = args!["cp", "-q"];
        all.extend(self.ftps_login());
        all.extend(args.iter().cloned());
        ferry_in(&self.home(), &all, &[])
    }

    /// The served certificate (PEM), for `curl --cacert`.
    pub fn cert_pem(&self) -> PathBuf {
        self.dir.path().join("state/tls-cert.pem")
    }

    /// `ferry cp -q --pin sha256:CERT [--token TOKEN] ARGS...` over HTTPS.
    pub fn https_cp(&self, with_token: bool, args: &[OsString]) -> Output {
        let mut all = args!["cp", "-q", "--pin", format!("sha256:{}", self.cert_sha256)];
        if with_token {
            all.extend(args!["--token", self.token.clone()]);
        }
        all.extend(args.iter().cloned());
        ferry_in(&self.home(), &all, &[])
    }

    /// Options for `ferry cp` to reach this server with `key`.
    pub fn ferry_opts_with(&self, key: &Path) -> Vec<OsString> {
        args![
            "-q",
            "-i",
            key,
            "-o",
            format!("UserKnownHostsFile={}", self.known_hosts().display()),
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
        ]
    }

    /// An ssh config naming two servers: sshd's own Host blocks (its
    /// config) and this server as `ferry-serve`, written into `dir`.
    pub fn config_with_sshd(&self, sshd: &super::Sshd, dir: &Path) -> PathBuf {
        let mut text = fs::read_to_string(sshd.ssh_config()).unwrap_or_default();
        text.push_str(&format!(
            "Host ferry-serve\n    HostName 127.0.0.1\n    Port {}\n    IdentityFile {}\n    IdentitiesOnly yes\n    UserKnownHostsFile {}\n    StrictHostKeyChecking yes\n",
            self.sftp_port.unwrap_or(0),
            self.key().display(),
            self.known_hosts().display()
        ));
        let p = dir.join("ssh_config_both");
        if let Err(e) = fs::write(&p, text) {
            panic!("{}: {e}", p.display());
        }
        p
    }

    /// `ferry cp OPTS ARGS...` against this server, with the authorized key.
    pub fn cp(&self, args: &[OsString]) -> Output {
        let mut all = args!["cp"];
        all.extend(self.ferry_opts_with(&self.key()));
        all.extend(args.iter().cloned());
        ferry_in(&self.home(), &all, &[])
    }

    /// An OpenSSH client (`sftp`, `scp`, `ssh`) set up for this server:
    /// no config file, its key only, its host key pinned.
    pub fn openssh(&self, prog: &str) -> Command {
        let mut c = Command::new("setsid");
        c.arg(prog)
            .env("HOME", self.home())
            .env_remove("SSH_AUTH_SOCK")
            .args([
                "-F",
                "/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
            ])
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                self.known_hosts().display()
            ))
            .arg("-i")
            .arg(self.key());
        let port = self.sftp_port.unwrap_or(0).to_string();
        if prog == "ssh" {
            c.args(["-p", &port]);
        } else {
            c.args(["-P", &port]);
        }
        c
    }

    /// Send SIGTERM and wait for the exit (at most `wait`).
    pub fn sigterm(&mut self, wait: Duration) -> Output {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
        }
        let deadline = std::time::Instant::now() + wait;
        loop {
            let done = self
                .child
                .as_mut()
                .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
            if done || std::time::Instant::now() >= deadline {
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        self.stop_kill()
    }

    /// Kill (if still running) and collect what it printed.
    pub fn stop_kill(&mut self) -> Output {
        let status = match self.child.take() {
            Some(mut c) => {
                if !matches!(c.try_wait(), Ok(Some(_))) {
                    let _ = c.kill();
                }
                c.wait().ok()
            }
            None => None,
        };
        let stdout = self
            .stdout
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Output {
            status: status.unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt;
                std::process::ExitStatus::from_raw(0)
            }),
            stdout: stdout.into_bytes(),
            stderr,
        }
    }
}

impl Drop for FerryServe {
    fn drop(&mut self) {
        let _ = self.stop_kill();
    }
}
