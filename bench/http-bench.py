#!/usr/bin/env python3
"""HTTP(S) benchmark: ferry against curl and aria2c, side by side, one run.

Starts its own nginx (sendfile on, TLS 1.3, http2, self-signed P-256
certificate, single process, `daemon off; master_process off;`) on a free
127.0.0.1 port with data on tmpfs (/dev/shm), runs every case with every tool
interleaved run by run, checks every destination by size (and SHA-256 on the
first run), and prints one table plus a JSON file (machine, versions, raw
runs). nginx and every client are stopped by PID, also on Ctrl-C.

Cases:
  huge-h2 / huge-h1  1 x 1 GiB: ferry vs curl (--http2 / --http1.1)
  huge-streams8      1 x 1 GiB: ferry --streams 8 (h2 and h1) vs aria2c -x8 -s8
  small              1000 x 20 kB: ferry -P 32 (h2) vs curl --parallel
                     --parallel-max 32 (h2) vs curl sequential (h2, one
                     connection)
  h2-windows         1 x 1 GiB over h2: ferry with hyper's default flow
                     control vs the tuned 16 MiB / 64 MiB / 1 MiB frame
  runtime            ferry with FERRY_HTTP_THREADS=0 (one thread), 1, 2

Usage: bench/http-bench.py [--runs 3] [--ferry target/release/ferry] [--quick]
                           [--only CASES] [--rtt-ms 20 [--linkem PATH]]
Python 3.9+, standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
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

REPO = Path(__file__).resolve().parent.parent
NGINX = "/usr/sbin/nginx"
GiB = 1 << 30
CHILDREN: list[subprocess.Popen] = []


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def stop_all(*_a) -> None:
    for p in CHILDREN:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    CHILDREN.clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx(d: Path, www: Path) -> tuple[int, int]:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "2"],
        check=True, capture_output=True)
    (d / "tmp").mkdir(exist_ok=True)
    https, http = free_port(), free_port()
    conf = f"""daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{https} ssl http2;
        listen 127.0.0.1:{http};
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        ssl_protocols TLSv1.3;
        http2_max_concurrent_streams 128;
        root {www};
        location / {{ autoindex on; }}
    }}
}}
"""
    (d / "nginx.conf").write_text(conf)
    p = subprocess.Popen([NGINX, "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(d / "error.log")],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    CHILDREN.append(p)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", https), timeout=1).close()
            return https, http
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nginx did not start:\n" + (d / "error.log").read_text())


def start_linkem(linkem: str, port: int, rtt_ms: float) -> int:
    """ferry-linkem in front of `port`; returns the port to connect to."""
    if not Path(linkem).exists():
        raise SystemExit(f"--rtt-ms needs ferry-linkem at {linkem}: cargo build --release -p ferry-linkem")
    p = subprocess.Popen([linkem, "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{port}",
                          "--delay-ms", f"{rtt_ms / 2:g}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    CHILDREN.append(p)
    line = p.stdout.readline().strip() if p.stdout else ""
    if not line.startswith("listening "):
        raise SystemExit(f"ferry-linkem did not start: {line!r}")
    return int(line.rsplit(":", 1)[1])


def make_data(www: Path, quick: bool) -> dict:
    huge = GiB // (16 if quick else 1)
    n_small = 1000 // (4 if quick else 1)
    with open(www / "huge.bin", "wb") as f:
        left = huge
        while left > 0:
            n = min(left, 1 << 20)
            f.write(os.urandom(n))
            left -= n
    (www / "small").mkdir(exist_ok=True)
    for i in range(n_small):
        (www / "small" / f"f{i:04}.bin").write_bytes(os.urandom(20_000))
    return {"huge": huge, "small": n_small}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    CHILDREN.append(p)
    _, err = p.communicate(timeout=900)
    dt = time.monotonic() - t0
    CHILDREN.remove(p)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd[:8])}...\n{err.decode(errors='replace')}")
    return dt, cpu


def version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"? ({e})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ferry", default=str(Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release/ferry"))
    ap.add_argument("--quick", action="store_true", help="64 MiB instead of 1 GiB, 250 small files")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--rtt-ms", type=float, default=0, help="add this round-trip time with ferry-linkem")
    ap.add_argument("--linkem", default=str(Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release/ferry-linkem"))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *a: (stop_all(), sys.exit(1)))
    base = Path(tempfile.mkdtemp(prefix="ferry-http-bench-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        run(args, base)
    finally:
        stop_all()
        shutil.rmtree(base, ignore_errors=True)


def run(args, base: Path) -> None:
    www = base / "www"
    www.mkdir()
    log("making data...")
    sizes = make_data(www, args.quick)
    https, _http = start_nginx(base, www)
    if args.rtt_ms > 0:
        https = start_linkem(args.linkem, https, args.rtt_ms)
    cert = str(base / "cert.pem")
    url = lambda p: f"https://127.0.0.1:{https}{p}"  # noqa: E731
    ferry = args.ferry
    out = base / "out"
    small_urls = [url(f"/small/f{i:04}.bin") for i in range(sizes["small"])]
    curl_list = base / "curl-small.txt"
    curl_list.write_text("".join(f'url = "{u}"\noutput = "{out}/f{i:04}.bin"\n' for i, u in enumerate(small_urls)))
    huge_sha = sha256(www / "huge.bin")

    def fresh() -> Path:
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        return out

    F = [ferry, "cp", "-q", "--cacert", cert]
    cases: dict[str, list[tuple[str, list[str], str]]] = {
        "huge-h2": [
            ("ferry", F + ["--http2", url("/huge.bin"), str(out / "huge.bin")], "huge"),
            ("curl", ["curl", "-sS", "--fail", "--http2", "--cacert", cert, "-o", str(out / "huge.bin"), url("/huge.bin")], "huge"),
        ],
        "huge-h1": [
            ("ferry", F + ["--http1.1", url("/huge.bin"), str(out / "huge.bin")], "huge"),
            ("curl", ["curl", "-sS", "--fail", "--http1.1", "--cacert", cert, "-o", str(out / "huge.bin"), url("/huge.bin")], "huge"),
        ],
        "huge-streams8": [
            ("ferry h2", F + ["--streams", "8", url("/huge.bin"), str(out / "huge.bin")], "huge"),
            ("ferry h1", F + ["--http1.1", "--streams", "8", url("/huge.bin"), str(out / "huge.bin")], "huge"),
            ("aria2c", ["aria2c", "-q", "-x8", "-s8", "--min-split-size=1M", "--file-allocation=none",
                        "--allow-overwrite=true", "--auto-file-renaming=false", f"--ca-certificate={cert}",
                        "-d", str(out), "-o", "huge.bin", url("/huge.bin")], "huge"),
        ],
        "small": [
            ("ferry -P32", F + ["-P", "32", *small_urls, str(out)], "small"),
            ("ferry (default -P 64)", F + [*small_urls, str(out)], "small"),
            ("ferry -P128", F + ["-P", "128", *small_urls, str(out)], "small"),
            ("curl --parallel", ["curl", "-sS", "--fail", "--http2", "--cacert", cert, "--parallel",
                                 "--parallel-max", "32", "-K", str(curl_list)], "small"),
            ("curl seq", ["curl", "-sS", "--fail", "--http2", "--cacert", cert, "-K", str(curl_list)], "small"),
        ],
        "h2-windows": [
            ("ferry tuned", F + ["--http2", url("/huge.bin"), str(out / "huge.bin")], "huge"),
            ("ferry hyper-defaults", F + ["--http2", "--h2-window", "65535", "--h2-conn-window", "65535",
                                          "--h2-frame", "16384", url("/huge.bin"), str(out / "huge.bin")], "huge"),
            ("ferry 4M/16M/1M", F + ["--http2", "--h2-window", str(4 << 20), "--h2-conn-window", str(16 << 20),
                                     url("/huge.bin"), str(out / "huge.bin")], "huge"),
        ],
        "runtime": [
            (f"ferry h2 threads={t}", ["env", f"FERRY_HTTP_THREADS={t}"] + F + ["--http2", url("/huge.bin"), str(out / "huge.bin")], "huge")
            for t in (0, 1, 2)
        ] + [
            (f"ferry h1 threads={t}", ["env", f"FERRY_HTTP_THREADS={t}"] + F + ["--http1.1", url("/huge.bin"), str(out / "huge.bin")], "huge")
            for t in (0, 2)
        ] + [
            ("ferry -P32 threads=0", ["env", "FERRY_HTTP_THREADS=0"] + F + ["-P", "32", *small_urls, str(out)], "small"),
        ],
    }
    if args.only:
        cases = {k: v for k, v in cases.items() if k in args.only.split(",")}
    results: dict[str, dict[str, list[dict]]] = {}
    for case, tools in cases.items():
        results[case] = {name: [] for name, _, _ in tools}
        for r in range(args.runs):
            for name, cmd, kind in tools:
                fresh()
                dt, cpu = timed(cmd)
                nbytes = sizes["huge"] if kind == "huge" else sizes["small"] * 20_000
                if kind == "huge":
                    got = out / "huge.bin"
                    if got.stat().st_size != sizes["huge"] or (r == 0 and sha256(got) != huge_sha):
                        raise SystemExit(f"{case}/{name}: wrong output")
                else:
                    files = list(out.iterdir())
                    if len(files) != sizes["small"] or any(f.stat().st_size != 20_000 for f in files):
                        raise SystemExit(f"{case}/{name}: wrong output ({len(files)} files)")
                results[case][name].append({"seconds": dt, "cpu": cpu, "mbps": nbytes / dt / 1e6})
                log(f"{case:14} {name:22} run {r + 1}: {dt:7.3f} s  {nbytes / dt / 1e6:8.1f} MB/s  cpu {cpu:6.2f} s")
    print()
    print(f"{'case':14} | {'tool':22} | {'median s':>9} | {'MB/s':>8} | {'CPU s':>6} | ratio vs first other tool")
    print("-" * 96)
    table = []
    for case, tools in results.items():
        med = {n: statistics.median(x["seconds"] for x in runs) for n, runs in tools.items()}
        names = list(tools)
        ref = next((n for n in names if not n.startswith("ferry")), names[-1])
        for n, runs in tools.items():
            m = med[n]
            cpu = statistics.median(x["cpu"] for x in runs)
            mbps = statistics.median(x["mbps"] for x in runs)
            ratio = med[ref] / m if m > 0 else 0
            print(f"{case:14} | {n:22} | {m:9.3f} | {mbps:8.1f} | {cpu:6.2f} | {ratio:5.2f}x vs {ref}")
            table.append({"case": case, "tool": n, "median_s": m, "mbps": mbps, "cpu_s": cpu, "vs": ref, "speedup": ratio})
    meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": platform.uname()._asdict(),
        "cpus": os.cpu_count(),
        "versions": {
            "ferry": version([ferry, "--version"]),
            "curl": version(["curl", "--version"]),
            "aria2c": version(["aria2c", "--version"]),
            "nginx": version([NGINX, "-v"]),
        },
        "sizes": sizes,
        "rtt_ms": args.rtt_ms,
        "runs": args.runs,
    }
    dest = REPO / "bench" / "runs" / time.strftime("%Y-%m-%d", time.gmtime())
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"http-{time.strftime('%H%M%S', time.gmtime())}.json"
    path.write_text(json.dumps({"meta": meta, "table": table, "raw": results}, indent=1))
    log(f"raw results: {path}")


if __name__ == "__main__":
    main()
