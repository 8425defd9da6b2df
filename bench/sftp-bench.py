#!/usr/bin/env python3
"""SFTP benchmark: ferry against OpenSSH's sftp (and optionally scp), side by side.

This script is for producing comparable, verified throughput numbers on one
machine. It generates deterministic data sets, starts a private OpenSSH sshd
on a free 127.0.0.1 port (optionally behind `ferry-linkem` to add round-trip
time), uploads and downloads every set with each tool, checks every
destination byte-for-byte by size and SHA-256, and prints one table plus a
JSON file with machine info, parameters and every raw run. Everything it
starts (sshd, ferry-linkem, transfer clients) is stopped by PID on exit,
including on Ctrl-C and SIGTERM. Python 3.11+, standard library only.

See bench/README.md for usage.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import platform
import random
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
SSHD = "/usr/sbin/sshd"
GiB = 1 << 30

# name -> (file count, file size in bytes)
SETS: dict[str, tuple[int, int]] = {
    "huge": (1, GiB),
    "large": (10, 12_000_000),
    "medium": (100, 1_000_000),
    "small": (1000, 20_000),
}
QUICK_DIVISOR = 16
ALL_TOOLS = ("sftp", "scp", "ferry")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Process bookkeeping: everything we start is recorded and stopped by PID.
# --------------------------------------------------------------------------

_live: dict[int, subprocess.Popen] = {}


def spawn(argv: list[str], **kw) -> subprocess.Popen:
    p = subprocess.Popen(argv, **kw)
    _live[p.pid] = p
    return p


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc), best effort."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def stop(p: subprocess.Popen, grace: float = 3.0, with_children: bool = False) -> None:
    """Stop one process we started (and optionally its direct children), by PID."""
    if p.poll() is None:
        kids = child_pids(p.pid) if with_children else []
        for pid in kids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            p.terminate()
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for pid in kids:  # still alive after the grace period: KILL by PID
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _live.pop(p.pid, None)


def stop_all() -> None:
    # Newest first: transfer clients, then the proxy, then sshd.
    for pid in sorted(_live, reverse=True):
        p = _live.get(pid)
        if p is not None:
            stop(p, with_children=True)


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


# --------------------------------------------------------------------------
# Data sets
# --------------------------------------------------------------------------

_WORDS_CACHE: list[bytes] | None = None


def _text_pool() -> list[bytes]:
    """128 blocks of 64 KiB of text-like content (words and numbers)."""
    global _WORDS_CACHE
    if _WORDS_CACHE is None:
        rng = random.Random("ferry-bench-text-pool-v1")
        letters = "etaoinshrdlucmfwypvbgkjqxz"
        vocab = [
            "".join(rng.choice(letters[: rng.randint(8, 26)]) for _ in range(rng.randint(2, 10)))
            for _ in range(400)
        ]
        blocks = []
        for _ in range(128):
            parts: list[str] = []
            size = 0
            while size < 65536:
                n = rng.randint(4, 14)
                words = [rng.choice(vocab) for _ in range(n)]
                if rng.random() < 0.6:
                    words.insert(rng.randrange(n), str(rng.randint(0, 99999)))
                line = " ".join(words) + ("\n" if rng.random() < 0.9 else ".\n\n")
                parts.append(line)
                size += len(line)
            blocks.append("".join(parts).encode()[:65536])
        _WORDS_CACHE = blocks
    return _WORDS_CACHE


def write_file(path: Path, size: int, seed: str, compressible: bool) -> None:
    rng = random.Random(seed)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        left = size
        if compressible:
            pool = _text_pool()
            offset = 0
            while left > 0:
                block = b"%s @%d\n" % (seed.encode(), offset) + pool[rng.randrange(len(pool))]
                piece = block[:left]
                f.write(piece)
                left -= len(piece)
                offset += len(piece)
        else:
            while left > 0:
                n = min(left, 16 << 20)
                f.write(rng.randbytes(n))
                left -= n
    tmp.rename(path)


@dataclass
class DataSet:
    name: str
    variant: str
    path: Path  # a directory, or the single file for "huge"
    files: list[Path]
    file_size: int
    total_bytes: int
    manifest: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def single_file(self) -> bool:
        return self.path.is_file()


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def make_set(work: Path, name: str, compressible: bool, quick: bool) -> DataSet:
    count, size = SETS[name]
    if quick:
        size //= QUICK_DIVISOR
    variant = "compressible" if compressible else "incompressible"
    scale = f"-q{QUICK_DIVISOR}" if quick else ""
    base = work / "data" / variant / f"{name}{scale}"
    base.mkdir(parents=True, exist_ok=True)
    ext = "txt" if compressible else "bin"
    files = [base / f"{name}-{i:04d}.{ext}" for i in range(count)]
    made = 0
    t0 = time.perf_counter()
    for i, p in enumerate(files):
        if p.is_file() and p.stat().st_size == size:
            continue
        write_file(p, size, f"{variant}:{name}:{i}:{size}", compressible)
        made += 1
    # Remove anything else (stale parts, files of an older layout).
    wanted = {p.name for p in files}
    for extra in base.iterdir():
        if extra.name not in wanted:
            if extra.is_dir():
                shutil.rmtree(extra)
            else:
                extra.unlink()
    if made:
        log(f"generated {made} file(s) for {name} ({variant}) in {time.perf_counter() - t0:.1f} s")
    path = files[0] if count == 1 else base
    ds = DataSet(name, variant, path, files, size, count * size)
    for p in files:
        rel = p.name if ds.single_file else str(p.relative_to(base))
        ds.manifest[rel] = (size, sha256_file(p))
    return ds


def verify(ds: DataSet, dst: Path) -> str | None:
    """None when `dst` holds exactly the set's bytes, else what is wrong."""
    if ds.single_file:
        if not dst.is_file():
            return f"{dst} missing"
        size, digest = ds.manifest[ds.path.name]
        if dst.stat().st_size != size:
            return f"{dst}: size {dst.stat().st_size} != {size}"
        if sha256_file(dst) != digest:
            return f"{dst}: content differs"
        return None
    if not dst.is_dir():
        return f"{dst} missing"
    found: dict[str, Path] = {}
    for root, _dirs, names in os.walk(dst):
        for n in names:
            p = Path(root) / n
            found[str(p.relative_to(dst))] = p
    missing = sorted(set(ds.manifest) - set(found))
    extra = sorted(set(found) - set(ds.manifest))
    if missing or extra:
        return f"{len(missing)} missing (e.g. {missing[:2]}), {len(extra)} extra (e.g. {extra[:2]})"
    for rel, (size, digest) in ds.manifest.items():
        p = found[rel]
        if p.stat().st_size != size:
            return f"{rel}: size {p.stat().st_size} != {size}"
        if sha256_file(p) != digest:
            return f"{rel}: content differs"
    return None


# --------------------------------------------------------------------------
# sshd and the link emulator
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_ssh_banner(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no SSH banner on 127.0.0.1:{port} after {timeout} s")


def keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ferry-bench", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.with_name(path.name + ".pub").read_text().strip()


@dataclass
class Server:
    dir: Path
    port: int  # where sshd listens
    connect_port: int  # where clients connect (the proxy when --rtt-ms)
    ssh_config: Path
    sshd: subprocess.Popen
    linkem: subprocess.Popen | None = None

    own_cpu: bool = False  # ferry serve: one process, count its own CPU

    def cpu_seconds(self) -> float | None:
        """CPU time of sshd's finished children (the per-connection processes
        and sftp-server), from /proc/PID/stat cutime+cstime; for ferry serve,
        the process's own utime+stime."""
        try:
            with open(f"/proc/{self.sshd.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            # fields[0] is field 3 (state); utime, stime are fields 14, 15;
            # cutime, cstime are fields 16, 17.
            if self.own_cpu:
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def wait_sessions_done(self, timeout: float = 3.0) -> None:
        deadline = time.monotonic() + timeout
        while child_pids(self.sshd.pid) and time.monotonic() < deadline:
            time.sleep(0.02)


def start_ferry_serve(work: Path, ferry: Path) -> tuple[Path, int, subprocess.Popen, str]:
    """`ferry serve /` on a free port, writable, with a private key; returns
    (dir, port, process, host public key line)."""
    d = Path(tempfile.mkdtemp(prefix="ferry-serve-", dir=work))
    client_pub = keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    p = spawn(
        [str(ferry), "serve", "/", "--sftp", f"127.0.0.1:{port}", "--no-https", "--writable",
         "--state-dir", str(d / "state"), "--authorized-keys", str(d / "authorized_keys")],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(d / "serve.log", "wb"), text=True,
    )
    host_line = ""
    for line in p.stdout:
        if line.startswith("hostkey-line "):
            host_line = line.split(" ", 1)[1].strip()
        if line.strip() == "ready":
            break
    if not host_line:
        stop(p)
        raise SystemExit(f"ferry serve did not start:\n{(d / 'serve.log').read_text()[-2000:]}")
    return d, port, p, host_line


def start_server(work: Path, linkem_bin: Path | None, rtt_ms: float, ferry_serve: Path | None = None) -> Server:
    if ferry_serve is not None:
        d, port, proc, host_pub = start_ferry_serve(work, ferry_serve)
        return finish_server(d, port, proc, host_pub, linkem_bin, rtt_ms, own_cpu=True)
    if not Path(SSHD).exists() or not Path(SFTP_SERVER).exists():
        raise SystemExit(
            f"{SSHD} or {SFTP_SERVER} missing: apt-get install -y openssh-server"
        )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="sshd-", dir=work))
    host_pub = keygen(d / "host_ed25519")
    client_pub = keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text(client_pub + "\n")
    port = free_port()
    cfg = d / "sshd_config"
    cfg.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {d / 'host_ed25519'}",
                f"AuthorizedKeysFile {d / 'authorized_keys'}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",
                f"PidFile {d / 'sshd.pid'}",
                f"Subsystem sftp {SFTP_SERVER}",
                "LogLevel ERROR",
                # sshd runs every session (also the sftp subsystem) through the
                # user's shell, and bash reads ~/.bashrc when started by sshd
                # unless SHLVL >= 2. A heavy .bashrc (here pyenv init: ~0.3 s)
                # would add a constant per-connection cost to every tool.
                "SetEnv SHLVL=1",
                # Parallel clients must not be refused by the default 10:30:100.
                "MaxStartups 200",
                "MaxSessions 200",
                "",
            ]
        )
    )
    sshd_log = open(d / "sshd.log", "wb")
    sshd = spawn([SSHD, "-D", "-e", "-f", str(cfg)], stdin=subprocess.DEVNULL, stdout=sshd_log, stderr=sshd_log)
    try:
        wait_for_ssh_banner(port, sshd)
    except RuntimeError as e:
        stop(sshd)
        raise SystemExit(f"sshd did not start ({e}):\n{(d / 'sshd.log').read_text()[-2000:]}")
    return finish_server(d, port, sshd, host_pub, linkem_bin, rtt_ms)


def finish_server(
    d: Path, port: int, sshd: subprocess.Popen, host_pub: str, linkem_bin: Path | None, rtt_ms: float, own_cpu: bool = False
) -> Server:
    """The delay proxy (if asked), known_hosts and the client's ssh_config."""
    connect_port = port
    linkem = None
    if rtt_ms > 0:
        if linkem_bin is None or not linkem_bin.exists():
            raise SystemExit(
                f"--rtt-ms needs ferry-linkem ({linkem_bin}): "
                "cargo build --release -p ferry-linkem, or pass --linkem PATH"
            )
        linkem = spawn(
            [
                str(linkem_bin),
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                f"127.0.0.1:{port}",
                "--delay-ms",
                f"{rtt_ms / 2:g}",
            ],
            stdin=subprocess.PIPE,  # kept open: the proxy exits if we die
            stdout=subprocess.PIPE,
            stderr=open(d / "linkem.log", "wb"),
            text=True,
        )
        line = linkem.stdout.readline().strip() if linkem.stdout else ""
        if not line.startswith("listening "):
            stop(linkem)
            stop(sshd)
            raise SystemExit(f"ferry-linkem did not start: {line!r}")
        connect_port = int(line.rsplit(":", 1)[1])
        wait_for_ssh_banner(connect_port, linkem)

    known = d / "known_hosts"
    key_type, key_b64 = host_pub.split()[:2]
    known.write_text(f"[127.0.0.1]:{connect_port} {key_type} {key_b64}\n")
    ssh_config = d / "ssh_config"
    ssh_config.write_text(
        "\n".join(
            [
                "Host bench",
                "  HostName 127.0.0.1",
                f"  Port {connect_port}",
                f"  User {getpass.getuser()}",
                f"  IdentityFile {d / 'client_ed25519'}",
                "  IdentitiesOnly yes",
                f"  UserKnownHostsFile {known}",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                "  PasswordAuthentication no",
                "  BatchMode yes",
                "",
            ]
        )
    )
    return Server(d, port, connect_port, ssh_config, sshd, linkem, own_cpu)


# --------------------------------------------------------------------------
# Transfers
# --------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float | None
    mb_per_s: float | None
    cpu_user: float
    cpu_sys: float
    server_cpu: float | None
    ok: bool
    error: str | None = None
    loadavg: float | None = None  # 1-minute load average just before the run


def tail(b: bytes, n: int = 800) -> str:
    return b.decode(errors="replace")[-n:].strip()


def transfer_command(
    tool: str, direction: str, src: Path, dst: Path, single: bool, server: Server, args, scratch: Path
) -> list[str]:
    cfg = str(server.ssh_config)
    cipher = ["-o", f"Ciphers={args.cipher}"] if args.cipher else []
    remote_src = f"bench:{src}"
    remote_dst = f"bench:{dst}"
    if tool == "sftp":
        batch = scratch / "sftp-batch"
        verb = "put" if direction == "upload" else "get"
        rflag = "" if single else " -r"
        batch.write_text(f"{verb}{rflag} {shlex.quote(str(src))} {shlex.quote(str(dst))}\n")
        return ["sftp", "-q", "-F", cfg, *cipher, "-b", str(batch), "bench"]
    if tool == "scp":
        pair = [str(src), remote_dst] if direction == "upload" else [remote_src, str(dst)]
        return ["scp", "-q", "-F", cfg, *cipher, "-r", *pair]
    if tool == "ferry":
        pair = [str(src), remote_dst] if direction == "upload" else [remote_src, str(dst)]
        extra = shlex.split(args.ferry_args) if args.ferry_args else []
        return [str(args.ferry), "cp", "-F", cfg, *cipher, *extra, "-r", *pair]
    raise ValueError(tool)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def measure(
    tool: str, direction: str, ds: DataSet, work: Path, server: Server, args, scratch: Path
) -> Run:
    if direction == "upload":
        src = ds.path
        dst_root = work / "remote" / ds.name
    else:
        src = ds.path  # the sshd serves the real filesystem: the data dir is "remote"
        dst_root = work / "local" / ds.name
    remove(dst_root)
    if ds.single_file:
        dst_root.mkdir(parents=True)
        dst = dst_root / ds.path.name
    else:
        dst_root.parent.mkdir(parents=True, exist_ok=True)
        dst = dst_root
    argv = transfer_command(tool, direction, src, dst, ds.single_file, server, args, scratch)

    server.wait_sessions_done()
    load = loadavg()
    srv0 = server.cpu_seconds()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=args.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        stop(p)
        out, err = p.communicate()
        timed_out = True
    seconds = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    _live.pop(p.pid, None)
    server.wait_sessions_done()
    srv1 = server.cpu_seconds()
    cpu_user = ru1.ru_utime - ru0.ru_utime
    cpu_sys = ru1.ru_stime - ru0.ru_stime
    server_cpu = None if srv0 is None or srv1 is None else round(srv1 - srv0, 3)

    def failed(what: str) -> Run:
        return Run(round(seconds, 4), None, round(cpu_user, 3), round(cpu_sys, 3), server_cpu, False, what, load)

    if timed_out:
        return failed(f"FAILED(timeout {args.timeout}s): {tail(err + out)}")
    if p.returncode != 0:
        return failed(f"FAILED(rc={p.returncode}): {tail(err + out)}")
    problem = verify(ds, dst)
    if problem:
        return failed(f"FAILED(verify): {problem}")
    mbps = ds.total_bytes / 1e6 / seconds
    return Run(round(seconds, 4), round(mbps, 2), round(cpu_user, 3), round(cpu_sys, 3), server_cpu, True, None, load)


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cmd_output(argv: list[str]) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unavailable: {e}"
    return (r.stdout + r.stderr).decode(errors="replace").strip()


def machine_info(args) -> dict:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "memory": mem,
        "kernel": platform.release(),
        "uname": " ".join(platform.uname()),
        "ssh_version": cmd_output(["ssh", "-V"]),
        "ferry_version": cmd_output([str(args.ferry), "--version"]) if args.ferry.exists() else "missing",
        "ferry_path": str(args.ferry),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg(),
        "git_commit": cmd_output(["git", "-C", str(REPO), "rev-parse", "HEAD"]),
    }


def summarize(runs: list[Run], missing: bool) -> dict:
    if missing:
        return {"status": "missing", "mb_per_s": None, "cpu_s": None, "server_cpu_s": None}
    bad = [r for r in runs if not r.ok]
    if bad:
        status = (bad[0].error or "FAILED").split(":", 1)[0]
        return {"status": status, "mb_per_s": None, "cpu_s": None, "server_cpu_s": None, "error": bad[0].error}
    srv = [r.server_cpu for r in runs if r.server_cpu is not None]
    return {
        "status": "ok",
        "mb_per_s": round(statistics.median(r.mb_per_s for r in runs if r.mb_per_s), 2),
        "cpu_s": round(statistics.median(r.cpu_user + r.cpu_sys for r in runs), 3),
        "server_cpu_s": round(statistics.median(srv), 3) if srv else None,
    }


def print_table(results: list[dict], header: str) -> None:
    rows = [("set", "direction", "tool", "MB/s (median)", "CPU s", "srv CPU s", "ratio vs sftp")]
    base: dict[tuple[str, str], float | None] = {}
    for r in results:
        if r["tool"] == "sftp":
            base[(r["set"], r["direction"])] = r["summary"]["mb_per_s"]
    for r in results:
        s = r["summary"]
        speed = f"{s['mb_per_s']:.1f}" if s["status"] == "ok" else s["status"]
        cpu = f"{s['cpu_s']:.2f}" if s.get("cpu_s") is not None else "-"
        srv = f"{s['server_cpu_s']:.2f}" if s.get("server_cpu_s") is not None else "-"
        b = base.get((r["set"], r["direction"]))
        if r["tool"] == "sftp" or s["mb_per_s"] is None or not b:
            ratio = "-"
        else:
            ratio = f"{s['mb_per_s'] / b:.2f}x"
        rows.append((r["set"], r["direction"], r["tool"], speed, cpu, srv, ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(header)
    for i, row in enumerate(rows):
        print(" | ".join(c.ljust(w) if j < 3 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    print(flush=True)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def default_bin(name: str, env: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "release" / name


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(
        description="Benchmark ferry against OpenSSH sftp/scp on a private local sshd.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ferry-bench"), help="data sets and destinations live here")
    ap.add_argument("--sets", default="huge,large,medium,small", help="comma list of: " + ",".join(SETS))
    ap.add_argument("--quick", action="store_true", help=f"divide file sizes by {QUICK_DIVISOR} (smoke runs)")
    ap.add_argument("--compressible", action="store_true", help="text-like files instead of random bytes")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell; the median is reported")
    ap.add_argument("--directions", default="upload,download", help="comma list of upload,download")
    ap.add_argument("--cipher", help="passed to every client as -o Ciphers=X")
    ap.add_argument("--scp", action="store_true", help="also measure OpenSSH scp")
    ap.add_argument("--no-ferry", action="store_true", help="skip ferry entirely")
    ap.add_argument("--ferry", type=Path, default=default_bin("ferry", "FERRY_BIN"), help="ferry binary (env FERRY_BIN)")
    ap.add_argument("--ferry-args", default="", help='extra ferry flags, e.g. "--chunk 1M"')
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="add this RTT with ferry-linkem (half each way)")
    ap.add_argument(
        "--linkem", type=Path, default=default_bin("ferry-linkem", "FERRY_LINKEM"), help="ferry-linkem binary (env FERRY_LINKEM)"
    )
    ap.add_argument(
        "--server", choices=["sshd", "ferry"], default="sshd",
        help="the SFTP server: OpenSSH sshd, or `ferry serve /` (the --ferry binary)",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before one transfer is killed")
    ap.add_argument("--json", type=Path, help="results file (default bench/out/sftp-<timestamp>.json)")
    args = ap.parse_args(argv)
    args.sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    for s in args.sets:
        if s not in SETS:
            ap.error(f"unknown set {s!r}; choose from {', '.join(SETS)}")
    args.directions = [d.strip() for d in args.directions.split(",") if d.strip()]
    for d in args.directions:
        if d not in ("upload", "download"):
            ap.error(f"unknown direction {d!r}")
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    args.tools = ["sftp"] + (["scp"] if args.scp else []) + ([] if args.no_ferry else ["ferry"])
    args.workdir = args.workdir.resolve()
    if args.json is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.json = REPO / "bench" / "out" / f"sftp-{stamp}.json"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    ferry_missing = not args.ferry.exists()
    if "ferry" in args.tools and ferry_missing:
        log(f"ferry binary not found at {args.ferry}: ferry cells will show 'missing'")

    load = loadavg()
    if load is not None and load > 0.5:
        log(f"warning: 1-minute load average is {load:.2f}; other work on this machine will skew the numbers")
    datasets = [make_set(work, s, args.compressible, args.quick) for s in args.sets]
    info = machine_info(args)
    params = {
        "sets": args.sets,
        "quick": args.quick,
        "variant": "compressible" if args.compressible else "incompressible",
        "runs": args.runs,
        "directions": args.directions,
        "tools": args.tools,
        "cipher": args.cipher,
        "ferry_args": args.ferry_args,
        "rtt_ms": args.rtt_ms,
        "server": args.server,
        "workdir": str(work),
        "argv": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    set_info = {
        ds.name: {"files": len(ds.files), "file_bytes": ds.file_size, "total_bytes": ds.total_bytes, "path": str(ds.path)}
        for ds in datasets
    }
    results: list[dict] = []

    def save() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"machine": info, "parameters": params, "sets": set_info, "results": results}
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.rename(args.json)

    server = None
    try:
        server = start_server(
            work, args.linkem if args.rtt_ms > 0 else None, args.rtt_ms, args.ferry if args.server == "ferry" else None
        )
        log(
            f"sshd pid {server.sshd.pid} on 127.0.0.1:{server.port}"
            + (f", ferry-linkem pid {server.linkem.pid} on :{server.connect_port} (RTT {args.rtt_ms:g} ms)" if server.linkem else "")
        )
        for ds in datasets:
            for direction in args.directions:
                runs: dict[str, list[Run]] = {t: [] for t in args.tools}
                for i in range(args.runs):
                    for tool in args.tools:
                        if tool == "ferry" and ferry_missing:
                            continue
                        if runs[tool] and not runs[tool][-1].ok:
                            continue  # a failed cell stays failed; don't waste time
                        r = measure(tool, direction, ds, work, server, args, server.dir)
                        runs[tool].append(r)
                        what = f"{r.mb_per_s:.1f} MB/s" if r.ok else (r.error or "FAILED")
                        log(f"[{ds.name} {direction} {tool} run {i + 1}/{args.runs}] {r.seconds:.2f} s  {what}")
                for tool in args.tools:
                    missing = tool == "ferry" and ferry_missing
                    results.append(
                        {
                            "set": ds.name,
                            "direction": direction,
                            "tool": tool,
                            "summary": summarize(runs[tool], missing),
                            "runs": [r.__dict__ for r in runs[tool]],
                        }
                    )
                save()
                remove(work / "remote" / ds.name)
                remove(work / "local" / ds.name)
    finally:
        stop_all()
        if server is not None:
            shutil.rmtree(server.dir, ignore_errors=True)
        if results:
            save()

    header = (
        f"ferry vs OpenSSH, {params['variant']}{' (quick)' if args.quick else ''}, "
        f"runs={args.runs}, RTT={args.rtt_ms:g} ms, cipher={args.cipher or 'default'}, "
        f"{info['nproc']} x {info['cpu_model']}"
    )
    print_table(results, header)
    log(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stop_all()
        log("interrupted")
        sys.exit(130)
    except SystemExit as e:
        if isinstance(e.code, int) and e.code > 128:
            log(f"stopped by signal {e.code - 128}")
        raise
