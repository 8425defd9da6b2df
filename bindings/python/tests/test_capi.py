"""libferry from C: examples/c/seedsets.c, built by scripts/test.sh
against the installed libferry (pkg-config), uploads the four scaled data
sets to the test sshd and downloads them back, verifying every file. The
binaries come from $FERRY_SEEDSETS (shared libferry) and
$FERRY_SEEDSETS_STATIC (libferry.a); without them the test skips.
examples/c/credentials.c ($FERRY_CREDENTIALS) logs in with a password
that its credentials callback gives, against a second sshd with password
logins on."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def seedsets_args(sshd, work: Path, percent: int):
    o = sshd.options()
    opts = ["-O", f"ssh_config={o['ssh_config']}", "-O", f"identity={o['identity']}"]
    for x in o["option"]:
        opts += ["-O", f"option={x}"]
    (work / "remote").mkdir()
    return ["-s", str(percent), *opts, str(work / "local"), sshd.url(f"{work}/remote/")]


@pytest.mark.parametrize("env,percent", [("FERRY_SEEDSETS", 5), ("FERRY_SEEDSETS_STATIC", 1)])
def test_seedsets_up_and_back_verified(sshd, work: Path, env: str, percent: int) -> None:
    exe = os.environ.get(env)
    if not exe:
        pytest.skip(f"${env} is not set (scripts/test.sh builds examples/c/seedsets.c)")
    p = subprocess.run([exe, *seedsets_args(sshd, work, percent)], capture_output=True, text=True, timeout=600)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all files verified" in p.stdout
    # Every set came back: 1 + 10 + 100 + 1000 files.
    assert sum(1 for f in (work / "local" / "down").rglob("*") if f.is_file()) == 1111


def test_a_bad_option_is_a_usage_code(sshd, work: Path) -> None:
    exe = os.environ.get("FERRY_SEEDSETS")
    if not exe:
        pytest.skip("$FERRY_SEEDSETS is not set")
    p = subprocess.run([exe, "-O", "paralel=2", "-c", str(work), sshd.url(f"{work}/x/")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1
    assert "parallel" in p.stderr and "usage error" in p.stderr


# --- the credentials callback (examples/c/credentials.c) -------------------

# The password user the Rust harness makes (crates/ferry/tests/common/mod.rs,
# ensure_password_user): the same name and password, so either creates it.
PASSWORD_USER = "ferrytest"
PASSWORD = "Ferry-test-pw-7"


def ensure_password_user() -> bool:
    """As root: the system user `ferrytest` with password PASSWORD (made
    once, idempotently). Not root: False."""
    if os.geteuid() != 0:
        return False
    if subprocess.run(["id", "-u", PASSWORD_USER], capture_output=True).returncode != 0:
        p = subprocess.run(["useradd", "-m", "-d", f"/home/{PASSWORD_USER}", "-s", "/bin/sh", PASSWORD_USER],
                           capture_output=True, text=True)
        assert p.returncode in (0, 9), p.stderr  # 9: made meanwhile by another run
    subprocess.run(["chpasswd"], input=f"{PASSWORD_USER}:{PASSWORD}\n", text=True, check=True)
    return True


@pytest.fixture(scope="module")
def password_sshd(sshd, tmp_path_factory: pytest.TempPathFactory):
    """A second sshd, like the session's but with password logins on."""
    from conftest import SSHD, stop, wait_port, free_port

    if not ensure_password_user():
        pytest.skip("password logins need the user ferrytest, made as root")
    d = tmp_path_factory.mktemp("sshd-pw")
    port = free_port()
    config = (sshd.dir / "sshd_config").read_text().replace(f"Port {sshd.port}\n", f"Port {port}\n")
    config = config.replace("PasswordAuthentication no", "PasswordAuthentication yes")
    config = config.replace(f"PidFile {sshd.dir / 'sshd.pid'}", f"PidFile {d / 'sshd.pid'}")
    (d / "sshd_config").write_text(config)
    log = d / "sshd.log"
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdin=subprocess.DEVNULL,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_port(port, proc, "sshd", log)
        (d / "known_hosts").write_text(sshd.host_key_line.replace(f"]:{sshd.port} ", f"]:{port} "))
        yield port, d
    finally:
        stop(proc)


def credentials_run(password_sshd, src: str, dst: str, password) -> subprocess.CompletedProcess:
    exe = os.environ.get("FERRY_CREDENTIALS")
    if not exe:
        pytest.skip("$FERRY_CREDENTIALS is not set (scripts/test.sh builds examples/c/credentials.c)")
    port, d = password_sshd
    (d / "empty_config").write_text("")
    opts = [f"ssh_config={d / 'empty_config'}", f"option=UserKnownHostsFile={d / 'known_hosts'}",
            "option=GlobalKnownHostsFile=/dev/null", "option=StrictHostKeyChecking=yes",
            "option=IdentityAgent=none", "option=PubkeyAuthentication=no"]
    env = {k: v for k, v in os.environ.items() if k not in ("FERRY_PASSWORD", "FERRY_TEST_PASSWORD")}
    if password is not None:
        env["FERRY_TEST_PASSWORD"] = password
    args = [exe, *[x for o in opts for x in ("-O", o)], src.replace("PORT", str(port)), dst]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)


def test_c_credentials_callback_answers_the_password(password_sshd, tmp_path: Path) -> None:
    # A directory the password user can read (pytest's are 0700, root's).
    shared = Path(tempfile.mkdtemp(prefix="ferry-capi-pw-"))
    try:
        shared.chmod(0o755)
        (shared / "f.bin").write_bytes(b"through a password login\n" * 1000)
        (shared / "f.bin").chmod(0o644)
        p = credentials_run(password_sshd, f"sftp://{PASSWORD_USER}@127.0.0.1:PORT{shared}/f.bin",
                            f"{tmp_path}/", PASSWORD)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"asked password {PASSWORD_USER}@127.0.0.1" in p.stdout
        assert (tmp_path / "f.bin").read_bytes() == (shared / "f.bin").read_bytes()

        # Declining (no password to give) is an authentication failure.
        p = credentials_run(password_sshd, f"sftp://{PASSWORD_USER}@127.0.0.1:PORT{shared}/f.bin",
                            f"{tmp_path}/again.bin", None)
        assert p.returncode == 1
        assert "asked password" in p.stdout and "result 3 " in p.stdout, p.stdout + p.stderr
        assert not (tmp_path / "again.bin").exists()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# --- S3 options by name (examples/c/seedsets.c -c) ---------------------------


def seedsets_s3(versitygw, tmp_path: Path, *args: str, opts=None) -> subprocess.CompletedProcess:
    """seedsets -O ... -c SRC DST with versitygw's endpoint and keys as
    options and no AWS_* variable (nor ~/.aws) in its environment."""
    exe = os.environ.get("FERRY_SEEDSETS")
    if not exe:
        pytest.skip("$FERRY_SEEDSETS is not set (scripts/test.sh builds examples/c/seedsets.c)")
    if opts is None:
        opts = versitygw.options()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"  # never 169.254.169.254
    env["HOME"] = str(tmp_path)
    flags = [x for k, v in opts.items() for x in ("-O", f"{k}={v}")]
    return subprocess.run([exe, *flags, "-c", *args], capture_output=True, text=True, timeout=120, env=env)


def test_c_s3_keys_and_endpoint_by_name(versitygw, tmp_path: Path) -> None:
    src = tmp_path / "cset"
    files = {f"f{i}.bin": os.urandom(1000 * i + 1) for i in range(5)}
    src.mkdir()
    for n, b in files.items():
        (src / n).write_bytes(b)
    p = seedsets_s3(versitygw, tmp_path, str(src), "s3://bucket/capi/")
    assert p.returncode == 0, p.stdout + p.stderr
    assert {f.name: f.read_bytes() for f in (versitygw.root / "bucket/capi/cset").iterdir()} == files
    p = seedsets_s3(versitygw, tmp_path, "s3://bucket/capi/cset", f"{tmp_path}/back/")
    assert p.returncode == 0, p.stdout + p.stderr
    assert {f.name: f.read_bytes() for f in (tmp_path / "back/cset").iterdir()} == files


def test_c_s3_secret_without_key_id_is_a_usage_error(versitygw, tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    opts = versitygw.options()
    del opts["s3_access_key_id"]
    p = seedsets_s3(versitygw, tmp_path, str(tmp_path / "a.bin"), "s3://bucket/capi-half/a.bin", opts=opts)
    assert p.returncode == 1
    assert "usage error" in p.stderr, p.stderr
    assert "s3_access_key_id" in p.stderr and "s3_secret_access_key" in p.stderr, p.stderr
    assert not (versitygw.root / "bucket/capi-half").exists()
