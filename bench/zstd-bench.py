#!/usr/bin/env python3
"""SSH compression scorecard for issue 21 (docs/internals/compression.md).

Starts ferry serve, an OpenSSH sshd (own config, 127.0.0.1, free ports) and
`ferry-linkem` proxies in front of both; then downloads one file, cases
interleaved run by run, and prints the median wall time, MB/s of file data
and CPU seconds of the client and of the server (utime + stime, children
included, read from /proc before and after), plus a JSON line per run.

Usage: bench/zstd-bench.py FERRY_BIN LINKEM_BIN [--runs 5] [--size-mib 128]
       [--rate-mbps 200] [--delay-ms 10] [--cases a,b,...] [--data text|random]
       [--ferry-base OLD_FERRY_BIN]

`--ferry-base` starts a second ferry serve from another build, behind its
own emulated link; a case named `base:CASE` (a ferry case to ferry serve)
runs that build's ferry cp against it, interleaved with the others: old and
new builds side by side in one run.

A ferry case may end in `@N` to run ferry cp with `--streams N` (e.g.
`ferry-auto@2`): N SSH connections, each with its own compressor.

`--direction up` uploads instead (ferry cases only, to ferry serve, or to
sshd for the cases ending in `-sshd`, each upload compared with the source
after its timing). The
cases `https-auto`, `https-on`, `https-off` and `https-default` upload
over HTTPS to ferry serve with `-C=auto`, `-C=on`, `-C=off` and no flag
(Content-Encoding: zstd PUTs; `--direction up` only). `ferry-default` and
`ferry-default-sshd` run ferry cp with no `-C` flag (the default, `auto`).
"""
import argparse
import filecmp
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HZ = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def cpu_of(pid):
    """utime + stime + cutime + cstime of `pid`, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / HZ


def make_text(path, size, seed):
    """Text-like lines of words and numbers (the same generator as the tests'
    make_text_file, in Python): about 4.2:1 with zstd -1 and a 1 MiB window
    (256 MiB to 60.5 MB), more than the scorecard's text (`ferry bench
    --compressible`, about 2.9:1); BENCHMARKS.md, run zstd-cells-1."""
    words = ("the ferry copies files over sftp and http with zstd compression "
             "window packet server client bytes level stream").split()
    rnd = random.Random(seed)
    out = bytearray()
    # 8 MiB of unique text, repeated: the repeats are 8 MiB apart, beyond
    # zstd's 1 MiB window (and zlib's 32 KiB), so they do not help either.
    while len(out) < min(size, 8 << 20):
        line = " ".join(rnd.choice(words) for _ in range(rnd.randint(4, 14)))
        out += line.encode()
        out += f" {rnd.randint(0, 99999)}\n".encode() if rnd.random() < 0.3 else b"\n"
    with open(path, "wb") as f:
        left = size
        while left:
            f.write(out[:left])
            left -= min(left, len(out))


def make_random(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            f.write(os.urandom(n))
            left -= n


def start_linkem(linkem, upstream_port, rate, delay, queue_mib=None):
    if rate is None and delay == 0:
        return None, upstream_port
    args = [linkem, "--listen", "127.0.0.1:0", "--upstream", f"127.0.0.1:{upstream_port}",
            "--delay-ms", str(delay), "--no-stdin"]
    if rate:
        args += ["--rate-mbps", str(rate)]
    if queue_mib:
        args += ["--max-buffer-mb", str(queue_mib)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    line = p.stdout.readline().split()
    return p, int(line[1].rsplit(":", 1)[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry")
    ap.add_argument("linkem")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--size-mib", type=int, default=128)
    ap.add_argument("--rate-mbps", type=int, default=None)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--queue-mib", type=int, default=None,
                    help="ferry-linkem's queue per direction (its default: 64 MiB, which takes "
                         "the first 64 MiB at memory speed)")
    ap.add_argument("--data", default="text", help="text, random, or a file's path")
    ap.add_argument("--cases", default="ferry-auto,ferry-off,ferry-on,sftp,sftp-C")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--direction", default="down", choices=["down", "up"])
    ap.add_argument("--ferry-base", default=None,
                    help="a second build: cases named base:CASE run its ferry cp against its "
                         "ferry serve (ferry cases to ferry serve only)")
    a = ap.parse_args()
    cases = a.cases.split(",")

    d = tempfile.mkdtemp(prefix="zstd-bench-", dir=a.dir)
    procs = []
    try:
        root = os.path.join(d, "root")
        os.makedirs(root)
        os.makedirs(os.path.join(d, "state"))
        os.makedirs(os.path.join(d, "home"))
        key = os.path.join(d, "id")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        shutil.copy(key + ".pub", os.path.join(d, "authorized_keys"))
        src = os.path.join(root, "data.bin")
        size = a.size_mib << 20
        if a.data == "text":
            make_text(src, size, 1)
        elif a.data == "random":
            make_random(src, size)
        else:
            # A file of one's own (e.g. `ferry bench --compressible --dir D`'s
            # data set), its first --size-mib MiB.
            with open(a.data, "rb") as f_in, open(src, "wb") as f_out:
                f_out.write(f_in.read(size))

        def start_serve(binary, extra=()):
            """ferry serve from `binary`: (process, sftp port, https port, cert, token)."""
            serve = subprocess.Popen(
                [binary, "serve", root, "--writable", "--sftp", "127.0.0.1:0", "--https",
                 "127.0.0.1:0", "--state-dir", os.path.join(d, "state"), "--authorized-keys",
                 os.path.join(d, "authorized_keys"), *extra],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                text=True, env=dict(os.environ, HOME=os.path.join(d, "home")))
            procs.append(serve)
            got = {}
            for line in serve.stdout:
                word, _, rest = line.strip().partition(" ")
                got[word] = rest.strip()
                if word == "ready":
                    break
            port = lambda w: int(got[w].split()[0].rsplit(":", 1)[1]) if w in got else None
            return serve, port("sftp"), port("https"), got.get("cert", "").split(" ")[0], \
                got.get("token", "").split(" ")[0]

        # ferry serve
        serve, serve_port, https_port, cert, token = start_serve(a.ferry)
        # The base build's ferry serve, for `base:` cases.
        if a.ferry_base:
            serve_b, serve_b_port, _, _, _ = start_serve(a.ferry_base)

        # sshd
        sshd_port = free_port()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        os.path.join(d, "hostkey")], check=True)
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write(f"Port {sshd_port}\nListenAddress 127.0.0.1\nHostKey {d}/hostkey\n"
                    f"AuthorizedKeysFile {d}/authorized_keys\nUsePAM no\nStrictModes no\n"
                    f"PidFile {d}/sshd.pid\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
                    "PermitRootLogin yes\nSetEnv SHLVL=1\n")
        os.makedirs("/run/sshd", exist_ok=True)
        sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", f"{d}/sshd_config"],
                                stderr=subprocess.DEVNULL)
        procs.append(sshd)
        time.sleep(0.5)

        lk1, serve_via = start_linkem(a.linkem, serve_port, a.rate_mbps, a.delay_ms, a.queue_mib)
        lk3, https_via = start_linkem(a.linkem, https_port, a.rate_mbps, a.delay_ms, a.queue_mib)
        procs += [lk3] if lk3 else []
        lk2, sshd_via = start_linkem(a.linkem, sshd_port, a.rate_mbps, a.delay_ms, a.queue_mib)
        procs += [p for p in (lk1, lk2) if p]
        if a.ferry_base:
            lk4, serve_b_via = start_linkem(a.linkem, serve_b_port, a.rate_mbps, a.delay_ms, a.queue_mib)
            procs += [lk4] if lk4 else []

        ssh_opts = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                    "-o", "IdentitiesOnly=yes", "-i", key]
        user = os.environ.get("USER", "root")

        up = a.direction == "up"

        def run_case(case, dest):
            name = case
            use_base = case.startswith("base:")
            case = case.removeprefix("base:")
            case, _, streams = case.partition("@")
            ferry = a.ferry_base if use_base else a.ferry
            if use_base and (not case.startswith("ferry") or case.endswith("sshd")):
                raise SystemExit(f"{name}: base: takes ferry cases to ferry serve only")
            if case.startswith("https"):
                flag = {"https-auto": ["-C=auto"], "https-on": ["-C=on"], "https-off": ["-C=off"],
                        "https-default": []}[case]
                port, server, link = https_via, serve, lk3
                cmd = [a.ferry, "cp", "-q", "--json", "--pin", cert, "--token", token] + flag + [
                    src, f"https://127.0.0.1:{port}/up/{os.path.basename(dest)}"]
                dest = os.path.join(root, "up", os.path.basename(dest))
            elif case.startswith("ferry") and up:
                flag = {"ferry-auto": "--compress=auto", "ferry-off": "--compress=off",
                        "ferry-on": "-C", "ferry-default": None, "ferry-zlib-sshd": "-C",
                        "ferry-off-sshd": "--compress=off", "ferry-default-sshd": None}[case]
                if case.endswith("sshd"):
                    # sshd serves the file system: the upload's absolute path.
                    port, server, link, base = sshd_via, sshd, lk2, os.path.join(root, "up")
                elif use_base:
                    port, server, link, base = serve_b_via, serve_b, lk4, "/up"
                else:
                    port, server, link, base = serve_via, serve, lk1, "/up"
                cmd = [ferry, "cp", "-q", "--json"] + ([flag] if flag else []) + (
                    ["--streams", streams] if streams else []) + ssh_opts + [
                    src, f"sftp://{user}@127.0.0.1:{port}{base}/{os.path.basename(dest)}"]
                dest = os.path.join(root, "up", os.path.basename(dest))
            elif case.startswith("ferry"):
                flag = {"ferry-auto": "--compress=auto", "ferry-off": "--compress=off",
                        "ferry-on": "-C", "ferry-zlib-sshd": "-C",
                        "ferry-off-sshd": "--compress=off", "ferry-default": None,
                        "ferry-default-sshd": None}[case]
                if case.endswith("sshd"):
                    port, server, path, link = sshd_via, sshd, src, lk2
                elif use_base:
                    port, server, path, link = serve_b_via, serve_b, "/data.bin", lk4
                else:
                    port, server, path, link = serve_via, serve, "/data.bin", lk1
                cmd = [ferry, "cp", "-q", "--json"] + ([flag] if flag else []) + (
                    ["--streams", streams] if streams else []) + ssh_opts + [
                    f"sftp://{user}@127.0.0.1:{port}{path}", dest]
            else:
                port, server, link = sshd_via, sshd, lk2
                cmd = ["sftp", "-q", "-F", "/dev/null", "-P", str(port)] + ssh_opts + (
                    ["-C"] if case == "sftp-C" else []) + ["-b", "-", f"{user}@127.0.0.1"]
            s0 = cpu_of(server.pid)
            l0 = cpu_of(link.pid) if link else 0.0
            r0 = os.times()
            t0 = time.monotonic()
            p = subprocess.run(cmd, input=f"get {src} {dest}\n" if case.startswith("sftp") else None,
                               capture_output=True, text=True, env=dict(os.environ, HOME=os.path.join(d, "home")))
            wall = time.monotonic() - t0
            r1 = os.times()
            # sshd's session processes are reaped (and their CPU counted in
            # the listener's cutime) a moment after the client exits.
            time.sleep(0.5)
            s1 = cpu_of(server.pid)
            l1 = cpu_of(link.pid) if link else 0.0
            if p.returncode != 0:
                raise SystemExit(f"{name} failed: {p.stderr}")
            got = os.path.getsize(dest)
            if got != size:
                raise SystemExit(f"{name}: got {got} bytes")
            if up and case.endswith("sshd") and not filecmp.cmp(src, dest, shallow=False):
                raise SystemExit(f"{case}: the upload differs from the source")
            if up:
                os.remove(dest)
            client_cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
            extra = {}
            if case.startswith("ferry") or case.startswith("https"):
                try:
                    extra = json.loads(p.stdout.strip().splitlines()[-1]).get("compression", {})
                except (ValueError, IndexError):
                    pass
            return wall, client_cpu, s1 - s0, l1 - l0, extra

        results = {c: [] for c in cases}
        out = os.path.join(d, "out.bin")
        # Warm up: one untimed run of each case.
        os.makedirs(os.path.join(root, "up"), exist_ok=True)
        for c in cases:
            run_case(c, out)
            if not up:
                os.remove(out)
        for i in range(a.runs):
            for c in cases:
                w, cc, sc, lc, extra = run_case(c, out)
                if not up:
                    os.remove(out)
                results[c].append((w, cc, sc, lc))
                print(json.dumps({"run": i, "case": c, "wall": round(w, 3), "client_cpu": round(cc, 2),
                                  "server_cpu": round(sc, 2), "linkem_cpu": round(lc, 2),
                                  "load": os.getloadavg()[0], "compression": extra}), flush=True)
        print(f"\n{a.direction}: {a.size_mib} MiB {a.data}, rate {a.rate_mbps} Mbit/s, one-way delay {a.delay_ms} ms, "
              f"{a.runs} runs, medians")
        print(f"{'case':<18} {'wall s':>8} {'MB/s':>8} {'client CPU s':>13} {'server CPU s':>13} "
              f"{'linkem CPU s':>13} {'CPU s/GB':>9}")
        for c in cases:
            w = statistics.median(r[0] for r in results[c])
            cc = statistics.median(r[1] for r in results[c])
            sc = statistics.median(r[2] for r in results[c])
            lc = statistics.median(r[3] for r in results[c])
            # CPU s/GB counts both ends, not the emulator.
            print(f"{c:<18} {w:8.3f} {size / w / 1e6:8.1f} {cc:13.2f} {sc:13.2f} {lc:13.2f} "
                  f"{(cc + sc) / (size / 1e9):9.2f}")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
