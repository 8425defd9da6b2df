//! The clients of the scorecard and the command line each one runs for a
//! cell (a data set, a direction, a server endpoint).
//!
//! Adding a peer: add a [`Client`] to [`CLIENTS`] (the binary it needs,
//! its protocol, which sets and directions it can do) and a branch in
//! [`command`] that builds its command line. The result must be the set's
//! files under `<dest>/<set>/`, nothing else; the runner empties the
//! destination before and verifies it after.
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use serde::Serialize;

use crate::data::DataSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Sftp,
    Https,
    Ftp,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Sftp => "sftp",
            Proto::Https => "https",
            Proto::Ftp => "ftp",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Download,
    Upload,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Download => "download",
            Direction::Upload => "upload",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord, Hash)]
pub enum ServerKind {
    #[serde(rename = "ferry serve")]
    FerryServe,
    #[serde(rename = "sshd")]
    Sshd,
    #[serde(rename = "nginx")]
    Nginx,
    #[serde(rename = "vsftpd")]
    Vsftpd,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::FerryServe => "ferry serve",
            ServerKind::Sshd => "sshd",
            ServerKind::Nginx => "nginx",
            ServerKind::Vsftpd => "vsftpd",
        }
    }
}

/// Which sets a client takes part in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fits {
    All,
    /// Only the single-file set (huge): segmented getters, h1 variant.
    SingleFile,
    /// Only sets of several files: parallel-file modes.
    ManyFiles,
}

/// One client (a tool in one mode).
#[derive(Debug, Clone, Copy)]
pub struct Client {
    /// Stable id, used by `--clients` and in the JSON.
    pub id: &'static str,
    /// What the table shows.
    pub label: &'static str,
    /// The program that must be installed (`ferry` is always there).
    pub program: &'static str,
    pub proto: Proto,
    pub ferry: bool,
    pub upload: bool,
    pub download: bool,
    pub fits: Fits,
}

const fn c(
    id: &'static str,
    label: &'static str,
    program: &'static str,
    proto: Proto,
    upload: bool,
    fits: Fits,
) -> Client {
    Client {
        id,
        label,
        program,
        proto,
        ferry: false,
        upload,
        download: true,
        fits,
    }
}

pub const CLIENTS: &[Client] = &[
    Client {
        ferry: true,
        ..c("ferry", "ferry cp", "ferry", Proto::Sftp, true, Fits::All)
    },
    // The compression cells (issue 21): run when named or with
    // --compressible (`compression_cell`).
    Client {
        ferry: true,
        ..c(
            "ferry-zstd",
            "ferry cp -C=auto",
            "ferry",
            Proto::Sftp,
            true,
            Fits::All,
        )
    },
    // `-C=off`: what `auto` is measured against (issue 21's "`auto` at
    // least 2x ferry without compression").
    Client {
        ferry: true,
        ..c(
            "ferry-off",
            "ferry cp -C=off",
            "ferry",
            Proto::Sftp,
            true,
            Fits::All,
        )
    },
    Client {
        ferry: true,
        ..c(
            "ferry-https-zstd",
            "ferry cp --compressed -C=auto",
            "ferry",
            Proto::Https,
            true,
            Fits::All,
        )
    },
    c(
        "ferry-base",
        "ferry cp (baseline)",
        "ferry",
        Proto::Sftp,
        true,
        Fits::All,
    ),
    c(
        "ferry-base-https",
        "ferry cp (baseline)",
        "ferry",
        Proto::Https,
        true,
        Fits::All,
    ),
    c(
        "ferry-base-ftp",
        "ferry cp (baseline)",
        "ferry",
        Proto::Ftp,
        true,
        Fits::All,
    ),
    c("sftp", "OpenSSH sftp", "sftp", Proto::Sftp, true, Fits::All),
    c("scp", "OpenSSH scp", "scp", Proto::Sftp, true, Fits::All),
    c("rclone", "rclone", "rclone", Proto::Sftp, true, Fits::All),
    c(
        "lftp-mirror",
        "lftp mirror --parallel=8",
        "lftp",
        Proto::Sftp,
        true,
        Fits::ManyFiles,
    ),
    c(
        "lftp-get",
        "lftp get/put",
        "lftp",
        Proto::Sftp,
        true,
        Fits::SingleFile,
    ),
    c(
        "lftp-pget",
        "lftp pget -n 8",
        "lftp",
        Proto::Sftp,
        false,
        Fits::SingleFile,
    ),
    Client {
        ferry: true,
        ..c(
            "ferry-https",
            "ferry cp",
            "ferry",
            Proto::Https,
            true,
            Fits::All,
        )
    },
    Client {
        ferry: true,
        ..c(
            "ferry-https-s8",
            "ferry cp --streams 8",
            "ferry",
            Proto::Https,
            false,
            Fits::SingleFile,
        )
    },
    c("curl", "curl (h2)", "curl", Proto::Https, true, Fits::All),
    c(
        "curl-h1",
        "curl (h1)",
        "curl",
        Proto::Https,
        true,
        Fits::SingleFile,
    ),
    c(
        "curl-Z",
        "curl --parallel (h2)",
        "curl",
        Proto::Https,
        true,
        Fits::ManyFiles,
    ),
    c(
        "aria2c",
        "aria2c -x8 -s8 / -j16",
        "aria2c",
        Proto::Https,
        false,
        Fits::All,
    ),
    Client {
        ferry: true,
        ..c(
            "ferry-ftp",
            "ferry cp",
            "ferry",
            Proto::Ftp,
            true,
            Fits::All,
        )
    },
    Client {
        ferry: true,
        ..c(
            "ferry-ftp-s8",
            "ferry cp --streams 8",
            "ferry",
            Proto::Ftp,
            false,
            Fits::SingleFile,
        )
    },
    c("curl-ftp", "curl", "curl", Proto::Ftp, true, Fits::All),
    c(
        "lftp-mirror-ftp",
        "lftp mirror --parallel=8",
        "lftp",
        Proto::Ftp,
        true,
        Fits::ManyFiles,
    ),
    c(
        "lftp-get-ftp",
        "lftp get/put",
        "lftp",
        Proto::Ftp,
        true,
        Fits::SingleFile,
    ),
    c(
        "lftp-pget-ftp",
        "lftp pget -n 8",
        "lftp",
        Proto::Ftp,
        false,
        Fits::SingleFile,
    ),
];

impl Client {
    pub fn takes(&self, ds: &DataSet, dir: Direction) -> bool {
        let fits = match self.fits {
            Fits::All => true,
            Fits::SingleFile => ds.single_file(),
            Fits::ManyFiles => !ds.single_file(),
        };
        fits && match dir {
            Direction::Download => self.download,
            Direction::Upload => self.upload,
        }
    }
}

/// Where a client connects to reach one server in one profile.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub server: ServerKind,
    pub proto: Proto,
    /// The address clients connect to: 127.0.0.1, or the server
    /// namespace's address under a packet-level profile.
    pub host: String,
    /// The network namespace clients run in (packet-level profiles).
    pub netns: Option<String>,
    /// The port clients connect to (the link emulator's, under a profile).
    pub port: u16,
    /// The server's path for the work dir's `srv/` ("" when it serves
    /// `srv/` as `/`).
    pub prefix: String,
    pub user: String,
    pub key: PathBuf,
    /// SSH: a config file with `Host bench 127.0.0.1` for this endpoint.
    pub ssh_config: PathBuf,
    pub known_hosts: PathBuf,
    /// HTTPS: the CA file to trust, and the bearer token if one is needed.
    pub cacert: PathBuf,
    pub token: Option<String>,
    /// Why this endpoint cannot be used (the cell is "n/a").
    pub unavailable: Option<String>,
}

impl Endpoint {
    /// The URL of a server path (for FTP, an absolute path: `%2F`).
    fn url(&self, path: &str) -> String {
        match self.proto {
            Proto::Ftp => format!(
                "ftp://{}:{}/%2F{}",
                self.host,
                self.port,
                path.trim_start_matches('/')
            ),
            _ => format!("https://{}:{}{}", self.host, self.port, path),
        }
    }
}

/// Local paths of one run.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Downloads land in `local/<set>/`.
    pub local: PathBuf,
    /// Scratch space for batch files and lists.
    pub scratch: PathBuf,
    /// The ferry binary.
    pub ferry: PathBuf,
    /// `--baseline`: the other ferry binary, for the `ferry-base*` clients.
    pub baseline: Option<PathBuf>,
}

/// Clients that measure compression: `ferry-zstd` (SSH, `-C=auto`: zstd
/// with ferry serve; with sshd none, then zlib by a rekey where it pays),
/// `ferry-off` (SSH, `-C=off`, the
/// same without compression) and `ferry-https-zstd`
/// (`--compressed`: zstd downloads, and uploads coded under `auto` where
/// ferry serve takes them). Left out of runs that name no clients unless
/// `--compressible` is given (random data only shows what `auto` costs).
pub fn compression_cell(id: &str) -> bool {
    matches!(id, "ferry-zstd" | "ferry-off" | "ferry-https-zstd")
}

/// The `ferry-base*` clients run the `--baseline` binary with the command
/// line of this ferry client.
pub fn baseline_twin(id: &str) -> Option<&'static str> {
    match id {
        "ferry-base" => Some("ferry"),
        "ferry-base-https" => Some("ferry-https"),
        "ferry-base-ftp" => Some("ferry-ftp"),
        _ => None,
    }
}

/// The command for one run, and whether the runner must create the
/// `<set>` directory in the destination before it starts (clients that
/// write files into an existing directory, unlike `cp -r`).
pub struct Plan {
    pub cmd: Command,
    pub precreate: bool,
}

fn ssh_opts_cmd(prog: &str, ep: &Endpoint) -> Command {
    let mut c = Command::new(prog);
    c.arg("-q").arg("-F").arg(&ep.ssh_config);
    c
}

/// Build the command line of `client` for `ds` in `dir` against `ep`.
pub fn command(
    client: &Client,
    ep: &Endpoint,
    ds: &DataSet,
    dir: Direction,
    variant_dir: &str,
    p: &Paths,
) -> Result<Plan> {
    let set = &ds.name;
    // Remote paths (server's view).
    let rsrc = format!("{}/data/{variant_dir}/{set}", ep.prefix);
    let rup = format!("{}/up", ep.prefix);
    let local = p.local.display().to_string();
    let src = ds.dir.display().to_string();
    let scratch = &p.scratch;
    let down = dir == Direction::Download;
    let plan = |cmd: Command, precreate: bool| Ok(Plan { cmd, precreate });
    if let Some(twin) = baseline_twin(client.id) {
        let (Some(base), Some(tc)) = (&p.baseline, CLIENTS.iter().find(|c| c.id == twin)) else {
            anyhow::bail!("{}: no --baseline binary given", client.id);
        };
        let bp = Paths {
            local: p.local.clone(),
            scratch: p.scratch.clone(),
            ferry: base.clone(),
            baseline: None,
        };
        return command(tc, ep, ds, dir, variant_dir, &bp);
    }
    match client.id {
        "ferry" | "ferry-zstd" | "ferry-off" => {
            let mut c = Command::new(&p.ferry);
            c.args(["cp", "-q", "-F"]).arg(&ep.ssh_config).arg("-r");
            match client.id {
                "ferry-zstd" => {
                    c.arg("--compress=auto");
                }
                "ferry-off" => {
                    c.arg("--compress=off");
                }
                _ => {}
            }
            if down {
                c.arg(format!("bench:{rsrc}")).arg(format!("{local}/"));
            } else {
                c.arg(&src).arg(format!("bench:{rup}/"));
            }
            plan(c, false)
        }
        "sftp" => {
            let batch = scratch.join("sftp.batch");
            let line = if down {
                format!("get -r \"{rsrc}\" \"{local}/{set}\"\n")
            } else {
                format!("put -r \"{src}\" \"{rup}/{set}\"\n")
            };
            fs::write(&batch, line)?;
            let mut c = ssh_opts_cmd("sftp", ep);
            c.arg("-b").arg(&batch).arg("bench");
            plan(c, false)
        }
        "scp" => {
            let mut c = ssh_opts_cmd("scp", ep);
            c.arg("-r");
            if down {
                c.arg(format!("bench:{rsrc}")).arg(format!("{local}/"));
            } else {
                c.arg(&src).arg(format!("bench:{rup}/"));
            }
            plan(c, false)
        }
        "rclone" => {
            let remote = format!(
                ":sftp,host={},port={},user={},key_file={},known_hosts_file={},shell_type=none,disable_hashcheck=true:",
                ep.host,
                ep.port,
                ep.user,
                ep.key.display(),
                ep.known_hosts.display()
            );
            let mut c = Command::new("rclone");
            c.env("RCLONE_CONFIG", "/dev/null").args(["copy", "-q"]);
            if down {
                c.arg(format!("{remote}{rsrc}"))
                    .arg(format!("{local}/{set}"));
            } else {
                c.arg(&src).arg(format!("{remote}{rup}/{set}"));
            }
            plan(c, false)
        }
        "lftp-mirror" | "lftp-get" | "lftp-pget" | "lftp-mirror-ftp" | "lftp-get-ftp"
        | "lftp-pget-ftp" => {
            let f = ds.files.first().map(|f| f.name.as_str()).unwrap_or("");
            let mode = client.id.trim_end_matches("-ftp");
            let (verb, precreate) = match (mode, down) {
                ("lftp-mirror", true) => (
                    format!("mirror --parallel=8 \"{rsrc}\" \"{local}/{set}\""),
                    false,
                ),
                ("lftp-mirror", false) => (
                    format!("mirror -R --parallel=8 \"{src}\" \"{rup}/{set}\""),
                    false,
                ),
                ("lftp-get", true) => {
                    (format!("get \"{rsrc}/{f}\" -o \"{local}/{set}/{f}\""), true)
                }
                ("lftp-get", false) => (format!("put \"{src}/{f}\" -o \"{rup}/{set}/{f}\""), true),
                _ => (
                    format!("pget -n 8 \"{rsrc}/{f}\" -o \"{local}/{set}/{f}\""),
                    true,
                ),
            };
            let open = match (ep.proto, &ep.token) {
                // ferry serve: explicit TLS required, the token as password.
                (Proto::Ftp, Some(t)) => format!(
                    "set ftp:ssl-force true; set ftp:ssl-protect-data true; set ssl:ca-file \"{}\"; open -u ferry,{t} ftp://{}:{}",
                    ep.cacert.display(),
                    ep.host,
                    ep.port
                ),
                (Proto::Ftp, None) => {
                    format!("open -u anonymous, ftp://{}:{}", ep.host, ep.port)
                }
                _ => format!(
                    "set sftp:connect-program \"ssh -a -x -F {}\"; open -u {}, sftp://{}:{}",
                    ep.ssh_config.display(),
                    ep.user,
                    ep.host,
                    ep.port
                ),
            };
            let script = format!(
                "set cmd:fail-exit yes; set net:max-retries 2; set net:timeout 60; \
                 set xfer:clobber on; {open}; {verb}"
            );
            let mut c = Command::new("lftp");
            c.arg("-c").arg(script);
            plan(c, precreate)
        }
        "ferry-https" | "ferry-https-s8" | "ferry-https-zstd" => {
            let mut c = Command::new(&p.ferry);
            c.args(["cp", "-q", "--cacert"]).arg(&ep.cacert);
            if client.id == "ferry-https-s8" {
                c.args(["--streams", "8"]);
            }
            if client.id == "ferry-https-zstd" {
                c.args(["--compressed", "--compress=auto"]);
            }
            if let Some(t) = &ep.token {
                c.args(["--token", t]);
            }
            if down {
                for f in &ds.files {
                    c.arg(ep.url(&format!("{rsrc}/{}", f.name)));
                }
                c.arg(format!("{local}/{set}/"));
            } else {
                for f in &ds.files {
                    c.arg(ds.dir.join(&f.name));
                }
                c.arg(ep.url(&format!("{rup}/{set}/")));
            }
            plan(c, true)
        }
        "ferry-ftp" | "ferry-ftp-s8" => {
            // Anonymous login (vsftpd's bench config), or TLS and the token
            // (ferry serve); -r both ways, -P at its FTP default (8 control
            // connections).
            let mut c = Command::new(&p.ferry);
            c.args(["cp", "-q", "-r"]);
            if let Some(t) = &ep.token {
                c.args(["--ssl-reqd", "--cacert"]).arg(&ep.cacert);
                c.arg("-u").arg(format!("ferry:{t}"));
            }
            if client.id == "ferry-ftp-s8" {
                c.args(["--streams", "8"]);
            }
            if down {
                c.arg(ep.url(&rsrc)).arg(format!("{local}/"));
            } else {
                c.arg(&src).arg(ep.url(&format!("{rup}/")));
            }
            plan(c, false)
        }
        "curl" | "curl-h1" | "curl-Z" | "curl-ftp" => {
            let list = scratch.join("curl.cfg");
            let mut cfg = String::new();
            for f in &ds.files {
                if down {
                    let _ = writeln!(
                        cfg,
                        "url = \"{}\"\noutput = \"{local}/{set}/{}\"",
                        ep.url(&format!("{rsrc}/{}", f.name)),
                        f.name
                    );
                } else {
                    let _ = writeln!(
                        cfg,
                        "upload-file = \"{src}/{}\"\nurl = \"{}\"\noutput = \"/dev/null\"",
                        f.name,
                        ep.url(&format!("{rup}/{set}/{}", f.name))
                    );
                }
            }
            fs::write(&list, cfg)?;
            let mut c = Command::new("curl");
            c.args(["-sS", "--fail"]);
            if ep.proto == Proto::Https {
                c.arg("--cacert").arg(&ep.cacert);
                c.arg(if client.id == "curl-h1" {
                    "--http1.1"
                } else {
                    "--http2"
                });
            }
            if client.id == "curl-Z" {
                c.arg("--parallel");
            }
            match (ep.proto, &ep.token) {
                (Proto::Ftp, Some(t)) => {
                    c.args(["--ssl-reqd", "--cacert"]).arg(&ep.cacert);
                    c.arg("-u").arg(format!("ferry:{t}"));
                }
                (_, Some(t)) => {
                    c.arg("-H").arg(format!("Authorization: Bearer {t}"));
                }
                (_, None) => {}
            }
            c.arg("-K").arg(&list);
            plan(c, true)
        }
        "aria2c" => {
            let mut c = Command::new("aria2c");
            c.args([
                "-q",
                "--file-allocation=none",
                "--allow-overwrite=true",
                "--auto-file-renaming=false",
                "--console-log-level=error",
                "--summary-interval=0",
                "--max-tries=1",
            ])
            .arg(format!("--ca-certificate={}", ep.cacert.display()))
            .arg("-d")
            .arg(format!("{local}/{set}"));
            if let Some(t) = &ep.token {
                c.arg(format!("--header=Authorization: Bearer {t}"));
            }
            if ds.single_file() {
                let f = ds.files.first().map(|f| f.name.as_str()).unwrap_or("");
                c.args(["-x8", "-s8", "-o", f])
                    .arg(ep.url(&format!("{rsrc}/{f}")));
            } else {
                let list = scratch.join("aria2.list");
                let mut s = String::new();
                for f in &ds.files {
                    let _ = writeln!(
                        s,
                        "{}\n  out={}",
                        ep.url(&format!("{rsrc}/{}", f.name)),
                        f.name
                    );
                }
                fs::write(&list, s)?;
                c.args(["-j16", "-i"]).arg(&list);
            }
            plan(c, true)
        }
        other => anyhow::bail!("no command for client {other}"),
    }
}

/// Write the per-endpoint SSH client config and known_hosts.
pub fn write_ssh_files(
    dir: &Path,
    name: &str,
    host: &str,
    port: u16,
    user: &str,
    key: &Path,
    hostkey_line: &str,
) -> Result<(PathBuf, PathBuf)> {
    let kh = dir.join(format!("{name}.known_hosts"));
    fs::write(&kh, format!("[{host}]:{port} {hostkey_line}\n"))?;
    let cfg = dir.join(format!("{name}.ssh_config"));
    fs::write(
        &cfg,
        format!(
            "Host bench {host}\n  HostName {host}\n  Port {port}\n  User {user}\n  \
             IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {kh}\n  \
             GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  \
             PasswordAuthentication no\n  BatchMode yes\n  LogLevel ERROR\n",
            key = key.display(),
            kh = kh.display(),
        ),
    )?;
    Ok((cfg, kh))
}
