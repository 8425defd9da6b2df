#!/usr/bin/env python3
"""The founding report's four data sets, up to OpenSSH's sshd and back,
through the libraries applications embed: ferry from Python (the `ferry`
package), paramiko (pipelined put, prefetched get), asyncssh
(max_requests=128, its block size from the server's limits), curl's
sftp:// (libssh2), ferry from C (libferry, examples/c/seedsets -c), and the
`ferry cp` release binary, in one run, interleaved.

Sets (scaled as in issue 22): 1 x 256 MiB, 10 x 12 MB, 100 x 1 MB,
1000 x 20 kB; --percent scales every file size. Each client copies each set
up (a directory, recursively where the client can) and down again; every
file that comes back is compared with what was sent. Medians of --runs,
client order rotated each run. Each client runs as a child process (the
Python ones through this script's --worker mode, so interpreter start-up
is not timed and the peak RSS is the client's own). CPU seconds: the
client's (user+sys of the child), the server's (sshd and its children,
from /proc/SSHD/stat cutime+cstime, as the listener reaps them).

Prints one table and writes JSON (--json). Timings are never asserted.

  python3 bench/bindings-bench.py --ferry target/release/ferry \
      --seedsets target/release/seedsets --runs 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

SETS = [("set1", 1, 256 << 20), ("set2", 10, 12_000_000), ("set3", 100, 1_000_000), ("set4", 1000, 20_000)]
SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


# --- worker mode: one copy by one Python client, in its own process --------


def worker(args: argparse.Namespace) -> None:
    opts = json.loads(args.worker_opts)
    src, dst = args.src, args.dst
    t0 = time.monotonic()
    c0 = time.process_time()
    if args.worker == "ferry-py":
        import ferry

        ferry.copy(src, dst, recursive=True, identity=opts["key"], ssh_config="/dev/null",
                   option=[f"UserKnownHostsFile={opts['known_hosts']}", "StrictHostKeyChecking=yes",
                           "IdentitiesOnly=yes"])
    elif args.worker == "paramiko":
        import paramiko

        c = paramiko.SSHClient()
        c.load_host_keys(opts["known_hosts"])
        c.connect("127.0.0.1", port=opts["port"], username=opts["user"], key_filename=opts["key"],
                  allow_agent=False, look_for_keys=False)
        sftp = c.open_sftp()
        if opts["direction"] == "up":
            base = Path(src)
            rdir = f"{dst.rstrip('/')}/{base.name}"
            sftp.mkdir(rdir)
            for f in sorted(base.iterdir()):
                sftp.put(str(f), f"{rdir}/{f.name}")  # putfo pipelines writes
        else:
            name = src.rstrip("/").rsplit("/", 1)[-1]
            ldir = Path(dst) / name
            ldir.mkdir()
            for n in sorted(sftp.listdir(src)):
                sftp.get(f"{src}/{n}", str(ldir / n), prefetch=True, max_concurrent_prefetch_requests=64)
        c.close()
    elif args.worker == "asyncssh":
        import asyncio

        import asyncssh

        async def run() -> None:
            async with asyncssh.connect("127.0.0.1", port=opts["port"], username=opts["user"],
                                        client_keys=[opts["key"]], known_hosts=opts["known_hosts"],
                                        agent_path=None) as conn:
                async with conn.start_sftp_client() as sftp:
                    if opts["direction"] == "up":
                        await sftp.put(src, dst, recurse=True, max_requests=128)
                    else:
                        await sftp.get(src, dst, recurse=True, max_requests=128)

        asyncio.run(run())
    else:
        raise SystemExit(f"unknown worker {args.worker}")
    print(json.dumps({
        "seconds": time.monotonic() - t0,
        "cpu": time.process_time() - c0,
        "maxrss_kib": vm_hwm_kib(),
    }))


def vm_hwm_kib() -> int:
    """Peak RSS of this process image. Not getrusage's ru_maxrss: Linux
    carries that across fork and exec, so a worker would report the
    parent's peak (this script holds whole files while it compares)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


# --- the servers and the data ------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, d: Path) -> None:
        self.dir = d
        self.port = free_port()
        for name in ("host_key", "id"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
        (d / "authorized_keys").write_text((d / "id.pub").read_text())
        self.user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nUsePAM no\n"
            f"StrictModes no\nPidFile {d / 'sshd.pid'}\nSubsystem sftp {SFTP_SERVER}\nPermitRootLogin yes\n"
            "MaxStartups 100\nMaxSessions 100\nSetEnv SHLVL=1\n")
        os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")],
                                     stderr=open(d / "sshd.log", "wb"), start_new_session=True)
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        pub = (d / "host_key.pub").read_text().split()
        (d / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")
        self.key = d / "id"
        self.known_hosts = d / "known_hosts"

    def cpu(self) -> float:
        """CPU seconds of sshd's reaped children (connections, sftp-server)."""
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / tick

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def fill(path: Path, size: int, seed: int) -> None:
    # Incompressible and different per file; os.urandom would do, but a
    # seed keeps runs comparable.
    import random

    r = random.Random(seed)
    with open(path, "wb") as f:
        for off in range(0, size, 1 << 20):  # randbytes wants < 2^31 bits
            f.write(r.randbytes(min(1 << 20, size - off)))


def make_sets(root: Path, percent: int) -> Dict[str, int]:
    sizes = {}
    for k, (name, count, size) in enumerate(SETS):
        size = size * percent // 100
        sizes[name] = size
        d = root / name
        d.mkdir(parents=True)
        for i in range(count):
            fill(d / f"f{i:04d}", size, k * 100000 + i)
    return sizes


def same_tree(a: Path, b: Path) -> bool:
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    if fa != fb:
        return False
    return all((a / p).read_bytes() == (b / p).read_bytes() for p in fa)


# --- the clients ---------------------------------------------------------------


def run_client(client: str, direction: str, src: str, dst: str, s: Sshd, a: argparse.Namespace) -> Dict[str, float]:
    url = f"sftp://{s.user}@127.0.0.1:{s.port}"
    ssh = ["-F", "/dev/null", "-i", str(s.key), "-o", f"UserKnownHostsFile={s.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out: Dict[str, float] = {}
    if client in ("ferry-py", "paramiko", "asyncssh"):
        opts = {"key": str(s.key), "known_hosts": str(s.known_hosts), "port": s.port, "user": s.user,
                "direction": direction}
        wsrc = src if direction == "up" else src[len(url):]
        wdst = dst if direction == "down" else dst[len(url):]
        if client == "ferry-py":
            wsrc, wdst = src, dst
        p = subprocess.run([a.python, __file__, "--worker", client, "--worker-opts", json.dumps(opts),
                            "--src", wsrc, "--dst", wdst], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{client} {direction}: {p.stderr[-2000:]}")
        w = json.loads(p.stdout.strip().splitlines()[-1])
        out = {"seconds": w["seconds"], "client_cpu": w["cpu"], "maxrss_mib": w["maxrss_kib"] / 1024}
    elif client == "ferry-cp":
        subprocess.run([a.ferry, "cp", "-r", "-q", *ssh, src, dst], check=True)
    elif client == "ferry-c":
        opts = [x for o in ("ssh_config=/dev/null", f"identity={s.key}",
                            f"option=UserKnownHostsFile={s.known_hosts}", "option=StrictHostKeyChecking=yes",
                            "option=IdentitiesOnly=yes") for x in ("-O", o)]
        p = subprocess.run([a.seedsets, *opts, "-c", src, dst], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"ferry-c {direction}: {p.stderr[-2000:]}")
        out = {"seconds": float(p.stdout.strip().splitlines()[-1])}
    elif client == "curl":
        key = ["--key", str(s.key), "--pubkey", f"{s.key}.pub", "-k", "-s", "-S"]
        if direction == "up":
            files = sorted(Path(src).iterdir())
            rdir = f"{dst.rstrip('/')}/{Path(src).name}/"
            glob = "{" + ",".join(str(f) for f in files) + "}" if len(files) > 1 else str(files[0])
            subprocess.run(["curl", *key, "--ftp-create-dirs", "-T", glob, rdir], check=True)
        else:
            name = src.rstrip("/").rsplit("/", 1)[-1]
            ldir = Path(dst) / name
            ldir.mkdir()
            n = len(list((Path(a.work) / "up" / name).iterdir()))
            rng = f"[0000-{n - 1:04d}]"
            subprocess.run(["curl", *key, f"{src}/f{rng}", "-o", f"{ldir}/f#1"], check=True)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.setdefault("seconds", wall)
    out.setdefault("client_cpu", (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("--worker-opts")
    ap.add_argument("--src")
    ap.add_argument("--dst")
    ap.add_argument("--ferry", default="target/release/ferry")
    ap.add_argument("--seedsets", default="target/release/seedsets")
    ap.add_argument("--python", default=sys.executable, help="a Python with ferry, paramiko, asyncssh")
    ap.add_argument("--clients", default="ferry-py,ferry-c,ferry-cp,asyncssh,paramiko,curl")
    ap.add_argument("--sets", default="set1,set2,set3,set4")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--percent", type=int, default=100)
    ap.add_argument("--work", default=None, help="directory for the data (default: a new one in /tmp)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    work = Path(a.work or tempfile.mkdtemp(prefix="ferry-bindings-bench-"))
    a.work = str(work)
    clients = a.clients.split(",")
    sets = a.sets.split(",")
    s = Sshd(Path(tempfile.mkdtemp(prefix="ferry-bench-sshd-")))
    try:
        sizes = make_sets(work / "up", a.percent)
        url = f"sftp://{s.user}@127.0.0.1:{s.port}"
        remote, down = work / "remote", work / "down"
        results: List[Dict[str, object]] = []
        # Warm-up: one small copy per client (page cache, first connections).
        for c in clients:
            for d in (remote, down):
                shutil.rmtree(d, ignore_errors=True)
                d.mkdir()
            run_client(c, "up", str(work / "up" / "set4"), f"{url}{remote}/", s, a)
        for run in range(a.runs):
            order = clients[run % len(clients):] + clients[: run % len(clients)]
            for name in sets:
                for c in order:
                    for d in (remote, down):
                        shutil.rmtree(d, ignore_errors=True)
                        d.mkdir()
                    for direction in ("up", "down"):
                        if direction == "up":
                            src, dst = str(work / "up" / name), f"{url}{remote}/"
                        else:
                            src, dst = f"{url}{remote}/{name}", f"{down}/"
                        cpu0 = s.cpu()
                        r = run_client(c, direction, src, dst, s, a)
                        time.sleep(0.2)  # let sshd reap the connection's processes
                        r["server_cpu"] = s.cpu() - cpu0
                        back = remote / name if direction == "up" else down / name
                        r.update(client=c, set=name, direction=direction, run=run,
                                 ok=same_tree(work / "up" / name, back))
                        results.append(r)
                        print(f"run {run} {name} {direction:4} {c:9} {r['seconds']:8.3f} s"
                              f"{'' if r['ok'] else '  MISMATCH'}", file=sys.stderr, flush=True)
        report(results, sizes, clients, sets, a)
    finally:
        s.stop()
        if not a.work or a.work.startswith(tempfile.gettempdir()):
            shutil.rmtree(work, ignore_errors=True)


def report(results: List[Dict[str, object]], sizes: Dict[str, int], clients: List[str], sets: List[str],
           a: argparse.Namespace) -> None:
    counts = {n: c for n, c, _ in SETS}
    rows = []
    print(f"{'set':5} {'dir':4} {'client':9} {'median s':>9} {'MB/s':>8} {'client cpu':>10} {'sshd cpu':>9}"
          f" {'rss MiB':>8} ok")
    for name in sets:
        total = sizes[name] * counts[name]
        for direction in ("up", "down"):
            for c in clients:
                rs = [r for r in results if r["client"] == c and r["set"] == name and r["direction"] == direction]
                if not rs:
                    continue
                med = statistics.median(float(r["seconds"]) for r in rs)
                row = {
                    "set": name, "direction": direction, "client": c, "runs": len(rs),
                    "seconds": [r["seconds"] for r in rs], "median_s": med, "mb_s": total / med / 1e6,
                    "client_cpu": statistics.median(float(r["client_cpu"]) for r in rs),
                    "server_cpu": statistics.median(float(r["server_cpu"]) for r in rs),
                    "maxrss_mib": max((float(r.get("maxrss_mib", 0)) for r in rs), default=0),
                    "all_ok": all(r["ok"] for r in rs),
                }
                rows.append(row)
                print(f"{name:5} {direction:4} {c:9} {med:9.3f} {row['mb_s']:8.1f} {row['client_cpu']:10.2f}"
                      f" {row['server_cpu']:9.2f} {row['maxrss_mib']:8.0f} {'yes' if row['all_ok'] else 'NO'}")
    # The sets as a whole: sum of medians per client.
    print()
    whole = {}
    for c in clients:
        whole[c] = sum(r["median_s"] for r in rows if r["client"] == c)
        print(f"all sets up+down {c:9} {whole[c]:8.2f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "host": platform.node(), "cpu": cpu_model(), "kernel": platform.release(),
            "python": platform.python_version(), "percent": a.percent, "runs": a.runs,
            "rows": rows, "whole_s": whole, "raw": results,
        }, indent=1))


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


if __name__ == "__main__":
    main()
