"""Servers for the tests of the `ferry` Python package, on 127.0.0.1 only.

Each fixture starts its server with its own configuration, keys and
directories under a temporary directory, on a free port, and stops it by
PID (its whole process group) when the session ends: OpenSSH's sshd,
`ferry serve` (the binary built by `cargo build -p ferry`, found through
$FERRY_BIN or $CARGO_TARGET_DIR), nginx with a self-signed certificate,
vsftpd (anonymous logins with uploads, as the Rust tests' harness
configures it in crates/ferry-bench/src/servers.rs), and versitygw (S3,
as crates/ferry/tests/common/versitygw.rs starts it). The same shape as crates/ferry/tests/common/ (Rust).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytest

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}: {log.read_text(errors='replace')[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGKILL the process group the server was started in (sshd's
    per-connection children included), by its PID."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def self_signed(d: Path, cn: str) -> None:
    """A test certificate for 127.0.0.1 and localhost: d/cert.pem, d/key.pem."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "2", "-subj", f"/CN={cn}", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
        check=True,
        capture_output=True,
    )


def keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "ferry-py-test", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path


@dataclass
class Sshd:
    dir: Path
    port: int
    user: str
    key: Path
    other_key: Path
    encrypted_key: Path
    passphrase: str
    known_hosts: Path
    host_key_line: str
    proc: subprocess.Popen = field(repr=False)

    def url(self, path: str) -> str:
        return f"sftp://{self.user}@127.0.0.1:{self.port}{path}"

    def options(self, key: Optional[Path] = None, strict: str = "yes") -> Dict[str, object]:
        """What a test passes to ferry.copy: this key only, this
        known_hosts only, no config or agent of the user running tests."""
        return {
            "ssh_config": str(self.dir / "empty_config"),
            "identity": str(key or self.key),
            "option": [
                f"UserKnownHostsFile={self.known_hosts}",
                "GlobalKnownHostsFile=/dev/null",
                f"StrictHostKeyChecking={strict}",
                "IdentitiesOnly=yes",
                "IdentityAgent=none",
            ],
        }


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    if not (os.path.exists(SSHD) and os.path.exists(SFTP_SERVER)):
        pytest.skip("OpenSSH sshd is not installed (scripts/install-peers.sh)")
    d = tmp_path_factory.mktemp("sshd")
    port = free_port()
    keygen(d / "host_key")
    key = keygen(d / "id")
    other = keygen(d / "other")
    passphrase = "hunter2"
    enc = keygen(d / "id_enc", passphrase)
    (d / "authorized_keys").write_text((d / "id.pub").read_text() + (d / "id_enc.pub").read_text())
    (d / "empty_config").write_text("")
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPubkeyAuthentication yes\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPidFile {d / 'sshd.pid'}\nSubsystem sftp {SFTP_SERVER}\n"
        "PermitRootLogin yes\nMaxStartups 100\nMaxSessions 100\nLogLevel VERBOSE\n"
        # sshd runs the subsystem through the user's shell; a nested bash
        # skips ~/.bashrc (crates/ferry/tests/common/mod.rs says why).
        "SetEnv SHLVL=1\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    log = d / "sshd.log"
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
        stdin=subprocess.DEVNULL,
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_port(port, proc, "sshd", log)
        host_pub = (d / "host_key.pub").read_text().split()
        line = f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n"
        (d / "known_hosts").write_text(line)
        yield Sshd(d, port, user, key, other, enc, passphrase, d / "known_hosts", line, proc)
    finally:
        stop(proc)


def ferry_bin() -> Optional[Path]:
    if os.environ.get("FERRY_BIN"):
        return Path(os.environ["FERRY_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "ferry"
        if p.exists():
            return p
    return None


@dataclass
class FerryServe:
    root: Path
    sftp_port: int
    https_port: int
    cert_sha256: str
    token: str
    known_hosts: Path
    key: Path
    dir: Path
    proc: subprocess.Popen = field(repr=False)

    def sftp(self, path: str) -> str:
        user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
        return f"sftp://{user}@127.0.0.1:{self.sftp_port}{path}"

    def https(self, path: str) -> str:
        return f"https://127.0.0.1:{self.https_port}{path}"

    def ssh_options(self) -> Dict[str, object]:
        return {
            "ssh_config": str(self.dir / "empty_config"),
            "identity": str(self.key),
            "option": [
                f"UserKnownHostsFile={self.known_hosts}",
                "GlobalKnownHostsFile=/dev/null",
                "StrictHostKeyChecking=yes",
                "IdentitiesOnly=yes",
                "IdentityAgent=none",
            ],
        }


@pytest.fixture(scope="session")
def ferry_serve(tmp_path_factory: pytest.TempPathFactory):
    exe = ferry_bin()
    if exe is None:
        pytest.skip("no ferry binary: cargo build -p ferry, or set FERRY_BIN")
    d = tmp_path_factory.mktemp("serve")
    for sub in ("root", "state", "home"):
        (d / sub).mkdir()
    key = keygen(d / "id")
    (d / "authorized_keys").write_text((d / "id.pub").read_text())
    (d / "empty_config").write_text("")
    out = open(d / "stdout", "w+b")
    proc = subprocess.Popen(
        [str(exe), "serve", str(d / "root"), "--sftp", "127.0.0.1:0", "--https", "127.0.0.1:0",
         "--state-dir", str(d / "state"), "--authorized-keys", str(d / "authorized_keys"), "--writable"],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=open(d / "stderr", "wb"),
        env={**os.environ, "HOME": str(d / "home")},
        start_new_session=True,
    )
    try:
        info: Dict[str, str] = {}
        deadline = time.monotonic() + 30
        while "ready" not in info:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("ferry serve did not print `ready`: " + (d / "stderr").read_text(errors="replace"))
            time.sleep(0.05)
            for line in (d / "stdout").read_text(errors="replace").splitlines():
                k, _, v = line.partition(" ")
                info[k] = v
        port = lambda v: int(v.rsplit(":", 1)[1])  # noqa: E731
        sftp_port = port(info["sftp"])
        (d / "known_hosts").write_text(f"[127.0.0.1]:{sftp_port} {info['hostkey-line']}\n")
        yield FerryServe(
            d / "root", sftp_port, port(info["https"]), info["cert"], info["token"], d / "known_hosts", key, d, proc
        )
    finally:
        stop(proc)


@dataclass
class Nginx:
    www: Path
    port: int
    cert: Path

    def https(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"


@pytest.fixture(scope="session")
def nginx(tmp_path_factory: pytest.TempPathFactory):
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe) or not shutil.which("openssl"):
        pytest.skip("nginx or openssl is not installed (scripts/install-peers.sh)")
    d = tmp_path_factory.mktemp("nginx")
    for sub in ("www", "logs", "tmp"):
        (d / sub).mkdir()
    self_signed(d, "localhost")
    port = free_port()
    user = "user root;\n" if os.geteuid() == 0 else ""
    (d / "nginx.conf").write_text(
        f"{user}daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\n"
        f"error_log {d}/logs/error.log warn;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n access_log off;\n client_body_temp_path {d}/tmp/body;\n proxy_temp_path {d}/tmp/proxy;\n"
        f" fastcgi_temp_path {d}/tmp/fastcgi;\n uwsgi_temp_path {d}/tmp/uwsgi;\n scgi_temp_path {d}/tmp/scgi;\n"
        f" default_type application/octet-stream;\n"
        f" server {{\n  listen 127.0.0.1:{port} ssl;\n  server_name localhost;\n"
        f"  ssl_certificate {d}/cert.pem;\n  ssl_certificate_key {d}/key.pem;\n"
        f"  root {d}/www;\n  autoindex on;\n }}\n}}\n"
    )
    log = d / "nginx.err"
    proc = subprocess.Popen(
        [exe, "-p", str(d), "-c", str(d / "nginx.conf"), "-e", "stderr"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        start_new_session=True,
    )
    try:
        wait_port(port, proc, "nginx", log)
        yield Nginx(d / "www", port, d / "cert.pem")
    finally:
        stop(proc)


@dataclass
class Ftpd:
    root: Path
    port: int

    def url(self, path: str) -> str:
        """`ftp://127.0.0.1:PORT/path`, the path relative to the login
        directory (`root`)."""
        return f"ftp://127.0.0.1:{self.port}/{path.lstrip('/')}"


@pytest.fixture(scope="session")
def vsftpd(tmp_path_factory: pytest.TempPathFactory):
    exe = "/usr/sbin/vsftpd"
    if not os.path.exists(exe):
        pytest.skip("vsftpd is not installed (scripts/install-peers.sh)")
    d = tmp_path_factory.mktemp("vsftpd")
    root = d / "root"
    root.mkdir()
    port = free_port()
    # Anonymous login as the launching user (vsftpd refuses local users
    # when it runs as the launching user), uploads allowed, passive mode
    # on 127.0.0.1: the configuration of ferry_bench::servers::Vsftpd.
    (d / "vsftpd.conf").write_text(
        f"listen=YES\nlisten_address=127.0.0.1\nlisten_port={port}\nbackground=NO\n"
        f"run_as_launching_user=YES\nanonymous_enable=YES\nanon_root={root}\nlocal_enable=NO\n"
        "write_enable=YES\nanon_upload_enable=YES\nanon_mkdir_write_enable=YES\n"
        "anon_other_write_enable=YES\nanon_umask=022\npasv_enable=YES\npasv_address=127.0.0.1\n"
        "seccomp_sandbox=NO\nxferlog_enable=NO\nmax_clients=50\nmax_per_ip=50\n"
        f"dirmessage_enable=NO\nconnect_from_port_20=NO\nno_anon_password=YES\nvsftpd_log_file={d / 'vsftpd.log'}\n"
    )
    log = d / "vsftpd.err"
    proc = subprocess.Popen(
        [exe, str(d / "vsftpd.conf")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        start_new_session=True,
    )
    try:
        wait_port(port, proc, "vsftpd", log)
        yield Ftpd(root, port)
    finally:
        stop(proc)


# The keys the Rust harness gives versitygw (crates/ferry/tests/common/versitygw.rs).
S3_ACCESS_KEY = "ferrytestaccess"
S3_SECRET_KEY = "ferrytestsecret0123456789"


def versitygw_bin() -> Optional[str]:
    """versitygw on PATH, in /usr/local/bin or where `go install` puts it
    (scripts/install-peers.sh), as the Rust harness looks for it."""
    for p in (shutil.which("versitygw"), "/usr/local/bin/versitygw", os.path.expanduser("~/go/bin/versitygw")):
        if p and os.path.isfile(p):
            return p
    return None


@dataclass
class Versitygw:
    root: Path
    port: int
    cert: Path

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def options(self, **extra: object) -> Dict[str, object]:
        """The store and its keys as keyword arguments only: nothing from
        the environment is needed."""
        return {
            "s3_endpoint": self.endpoint,
            "s3_region": "us-east-1",
            "s3_access_key_id": S3_ACCESS_KEY,
            "s3_secret_access_key": S3_SECRET_KEY,
            "cacert": str(self.cert),
            **extra,
        }


@pytest.fixture(scope="session")
def versitygw(tmp_path_factory: pytest.TempPathFactory):
    """versitygw (a Go S3 gateway) with its POSIX backend: bucket `B`'s
    object `K` is the file `root/B/K`. On a free port on 127.0.0.1, TLS
    with a fresh self-signed certificate, the Rust harness's keys; buckets
    `bucket` and `other`."""
    exe = versitygw_bin()
    if exe is None or not shutil.which("openssl"):
        pytest.skip("versitygw or openssl is not installed (scripts/install-peers.sh)")
    d = tmp_path_factory.mktemp("versitygw")
    root = d / "root"
    for b in ("bucket", "other"):
        (root / b).mkdir(parents=True)
    self_signed(d, "127.0.0.1")
    log = d / "versitygw.log"
    last = ""
    for _ in range(5):  # another process may take the free port first
        port = free_port()
        proc = subprocess.Popen(
            [exe, "--access", S3_ACCESS_KEY, "--secret", S3_SECRET_KEY, "--quiet",
             "--port", f"127.0.0.1:{port}", "--cert", str(d / "cert.pem"), "--key", str(d / "key.pem"),
             "posix", str(root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(log, "wb"),
            # Its own keys only: no AWS_* of whoever runs the tests.
            env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            start_new_session=True,
        )
        try:
            wait_port(port, proc, "versitygw", log)
            break
        except RuntimeError as e:
            last = str(e)
            stop(proc)
    else:
        raise RuntimeError(f"versitygw did not start: {last}")
    try:
        yield Versitygw(root, port, d / "cert.pem")
    finally:
        stop(proc)


def make_file(path: Path, size: int, seed: int = 0) -> bytes:
    """Deterministic bytes that differ per file (so a mix-up shows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    block = bytes((i * 31 + seed) & 0xFF for i in range(4096))
    data = (block * (size // 4096 + 1))[:size]
    path.write_bytes(data)
    return data


def tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A fresh directory that the test's sshd can reach by absolute path."""
    return tmp_path


def names(files: List[Path]) -> List[str]:
    return sorted(p.name for p in files)
