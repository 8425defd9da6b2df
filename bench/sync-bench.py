#!/usr/bin/env python3
"""ferry sync against rsync, lftp mirror and rclone sync, side by side
(docs/internals/sync.md, BENCHMARKS.md).

Starts its own OpenSSH sshd (and ferry serve, for --checksum) on 127.0.0.1
(free ports, own config, stopped by PID), makes a tree, and times,
interleaved in a shuffled order each run, for each tool into its own
destination directory on sshd:

  initial   the destination emptied first: everything is sent
  nochange  right after: nothing to do
  changed   1% of the files rewritten (new bytes, new mtime) first
  checksum  (--checksum cell) nothing changed, contents compared:
            ferry sync -c to ferry serve (hashes on the server),
            rsync -a --checksum to sshd
  checksum-sshd  (not in the default cells) ferry sync -c to sshd too:
            sshd runs commands here, so ferry hashes each file with
            sha256sum over an exec channel of its own (10,000 shells on
            the small tree: minutes, not seconds)

Tools: ferry sync; ferry-cp (`ferry cp -r -p` of the same tree into
its own directory, initial cell only: a reference for the copy path, not
a sync; not in the default tools); rsync -a over ssh (same ssh config, same key);
lftp mirror -R --parallel=8 (sftp, ssh as its connect program); rclone sync
(sftp remote with shell_type=none so it never runs md5sum over ssh).
One warm-up run is not counted. Wall seconds, and CPU seconds of the
client and of the servers (sshd with its reaped children, ferry serve).

With --ferry-base OLD, that build runs as the tool ferry-base in the same
run (and its own ferry serve for the checksum cell, `ferry-base-serve -c`),
so a change is shown old against new.

Usage: bench/sync-bench.py --ferry target/release/ferry --tree small|big
         [--dir /var/tmp] [--runs 5] [--tools ferry,rsync,lftp,rclone]
         [--ferry-base OLD]
         [--cells initial,nochange,changed,checksum[,checksum-sshd]] [--one-dst]
         [--json out.json]
"""
import argparse, json, os, random, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from r2r import free_port, wait_port, cpu_of, run_timed, start_sshd, stop_all, tree_pids  # noqa: E402

TREES = {
    # files, directories, smallest and largest file
    "small": (10_000, 500, 2_000, 40_000),
    "big": (1_000, 100, 1_000_000, 4_000_000),
    "tiny": (400, 20, 2_000, 40_000),  # a smoke run of the script itself
}


def make_tree(root, kind, seed=1):
    n, dirs, lo, hi = TREES[kind]
    rnd = random.Random(seed)
    block = os.urandom(1 << 22)
    paths = []
    for i in range(n):
        d = os.path.join(root, f"d{i % dirs:03}")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"f{i:05}.bin")
        size = rnd.randint(lo, hi)
        off = rnd.randint(0, len(block) - size)
        with open(p, "wb") as f:
            f.write(block[off:off + size])
        paths.append(p)
    return paths


def change(paths, run, frac=0.01):
    """Rewrite 1% of the files: new bytes, same size, mtime now + run."""
    rnd = random.Random(1000 + run)
    picked = rnd.sample(paths, max(1, int(len(paths) * frac)))
    t = time.time() + run
    for p in picked:
        data = bytearray(open(p, "rb").read())
        for k in range(min(64, len(data))):
            data[k] ^= 0xA5
        open(p, "wb").write(data)
        os.utime(p, (t, t))
    return len(picked)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--tree", default="small", choices=sorted(TREES))
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tools", default="ferry,rsync,lftp,rclone")
    ap.add_argument("--ferry-base", help="an older ferry build, run as the tool ferry-base in the same run")
    ap.add_argument("--cells", default="initial,nochange,changed,checksum")
    ap.add_argument("--sftp-server", default="internal-sftp")
    ap.add_argument("--one-dst", action="store_true",
                    help="keep one destination tree at a time (disk space: the big tree)")
    ap.add_argument("--json")
    a = ap.parse_args()
    ferry = os.path.abspath(a.ferry)
    tools = [t for t in a.tools.split(",") if t in ("ferry", "ferry-cp") or shutil.which(t)]
    if a.ferry_base:
        tools.append("ferry-base")
    cells = a.cells.split(",")
    base = tempfile.mkdtemp(prefix="syncb-", dir=a.dir)
    procs = []
    try:
        d = lambda *p: os.path.join(base, *p)
        for sub in ["sshd", "serve/root", "serve/state", "base/root", "base/state", "keys", "home", "src"]:
            os.makedirs(d(sub), exist_ok=True)
        user = os.environ.get("USER") or "root"
        sp, sshd = start_sshd(d, a.sftp_server, "MaxStartups 100\nMaxSessions 100\n")
        procs.append(sshd)
        sshd_pid = sshd.pid
        fp = free_port()
        procs.append(subprocess.Popen([ferry, "serve", d("serve/root"), "--writable", "--sftp", f"127.0.0.1:{fp}",
                                       "--no-https", "--state-dir", d("serve/state"),
                                       "--authorized-keys", d("keys/authorized_keys")],
                                      stdout=subprocess.DEVNULL, stderr=open(d("serve/log"), "w")))
        serve_pid = procs[-1].pid
        ports = [sp, fp]
        bp = free_port()
        if a.ferry_base:
            # The old build's client against the old build's server.
            procs.append(subprocess.Popen([os.path.abspath(a.ferry_base), "serve", d("base/root"), "--writable",
                                           "--sftp", f"127.0.0.1:{bp}", "--no-https", "--state-dir", d("base/state"),
                                           "--authorized-keys", d("keys/authorized_keys")],
                                          stdout=subprocess.DEVNULL, stderr=open(d("base/log"), "w")))
            ports.append(bp)
        base_pid = procs[-1].pid if a.ferry_base else None
        for p in ports:
            wait_port(p)
        cfg = d("home/ssh_config")
        common = ("  IdentityFile {k}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
                  "  User {u}\n  LogLevel ERROR\n").format(k=d("keys/id"), u=user)
        open(cfg, "w").write(f"Host sshd\n  HostName 127.0.0.1\n  Port {sp}\n{common}"
                             f"Host serve\n  HostName 127.0.0.1\n  Port {fp}\n{common}"
                             f"Host serve-base\n  HostName 127.0.0.1\n  Port {bp}\n{common}")
        env = dict(os.environ, HOME=d("home"))
        env.pop("SSH_AUTH_SOCK", None)
        env.pop("AWS_CA_BUNDLE", None)
        print(f"making the {a.tree} tree in {d('src')}", flush=True)
        paths = make_tree(d("src"), a.tree)
        total = sum(os.path.getsize(p) for p in paths)
        print(f"{len(paths)} files, {total / 1e6:.0f} MB", flush=True)
        src = d("src")
        rclone_remote = (f":sftp,host=127.0.0.1,port={sp},user={user},key_file={d('keys/id')},"
                         f"shell_type=none,disable_hashcheck=true:")

        def dst(tool):
            return d("sshd", f"dst-{tool}")

        def cmd(tool, checksum=False):
            t = dst(tool)
            if tool in ("ferry", "ferry-base"):
                exe = ferry if tool == "ferry" else os.path.abspath(a.ferry_base)
                return [exe, "sync", "-q", "-F", cfg] + (["-c"] if checksum else []) + [src, f"sftp://sshd{t}"]
            if tool == "ferry-cp":
                return [ferry, "cp", "-r", "-p", "-q", "-F", cfg, src + "/", f"sftp://sshd{t}/"]
            if tool == "ferry-serve":
                return [ferry, "sync", "-q", "-F", cfg, "-c", src, "sftp://serve/dst"]
            if tool == "ferry-base-serve":
                return [os.path.abspath(a.ferry_base), "sync", "-q", "-F", cfg, "-c", src, "sftp://serve-base/dst"]
            if tool == "rsync":
                return ["rsync", "-a"] + (["--checksum"] if checksum else []) + \
                       ["-e", f"ssh -F {cfg}", src + "/", f"sshd:{t}/"]
            if tool == "lftp":
                return ["lftp", "-c",
                        f"set sftp:connect-program 'ssh -a -x -F {cfg}'; open -u {user}, sftp://sshd; "
                        f"mirror -R --parallel=8 {src} {t}"]
            if tool == "rclone":
                return ["rclone", "sync", "-q", "--config", "/dev/null", src, rclone_remote + t]
            raise ValueError(tool)

        servers = lambda: cpu_of(sshd_pid, True) + cpu_of(serve_pid) + (cpu_of(base_pid) if base_pid else 0)
        results = {}

        def settle():
            # A session's sshd child counts once reaped: wait for it (a
            # client may exit before its server side has).
            end = time.time() + 5
            while len(tree_pids(sshd_pid)) > 1 and time.time() < end:
                time.sleep(0.02)

        def timed(cell, tool, c, r):
            settle()
            s0 = servers()
            w, u = run_timed(c, env)
            settle()
            srv = servers() - s0
            if r > 0:
                results.setdefault((cell, tool), []).append((w, u, srv))
                print(f"run {r} {cell:9} {tool:11} {w:7.2f} s  client {u:5.2f} CPU-s  servers {srv:5.2f} CPU-s", flush=True)

        for r in range(a.runs + 1):
            order = list(tools)
            random.Random(r).shuffle(order)
            if a.one_dst:
                # One destination tree at a time (the big tree is 2.5 GB a
                # copy): each tool's three cells in a row, then its tree
                # goes (rsync's stays for the checksum cell).
                for i, t in enumerate(order):
                    shutil.rmtree(dst(t), ignore_errors=True)
                    os.sync()  # see below
                    timed("initial", t, cmd(t), r)
                    if t != "ferry-cp":
                        timed("nochange", t, cmd(t), r)
                        change(paths, 100 * r + i)
                        timed("changed", t, cmd(t), r)
                    if t != "rsync":
                        shutil.rmtree(dst(t), ignore_errors=True)
            elif "initial" in cells or r == 0:
                for t in order:
                    shutil.rmtree(dst(t), ignore_errors=True)
                    # Deletions written back first: ext4 without a journal
                    # skips the free inodes deleted in the last minutes
                    # when it makes a file, longer while their blocks are
                    # not written back (BENCHMARKS.md, run tmpfile-1), and
                    # the last tool's tree just went.
                    os.sync()
                    timed("initial", t, cmd(t), r)
            syncs = [t for t in order if t != "ferry-cp"]
            if "nochange" in cells and not a.one_dst:
                for t in syncs:
                    timed("nochange", t, cmd(t), r)
            if "changed" in cells and not a.one_dst:
                change(paths, r)
                for t in syncs:
                    timed("changed", t, cmd(t), r)
            if "checksum" in cells or "checksum-sshd" in cells:
                if r == 0 or "changed" in cells:
                    # The first copy to ferry serve, or the files the
                    # changed cell rewrote: the cell compares trees that
                    # are the same, as rsync's is after its changed run.
                    run_timed(cmd("ferry-serve"), env)
                    if a.ferry_base:
                        run_timed(cmd("ferry-base-serve"), env)
                ck = [("ferry-serve -c", cmd("ferry-serve"))]
                if not a.one_dst and "checksum-sshd" in cells:
                    ck.append(("ferry -c", cmd("ferry", True)))
                if "rsync" in tools:
                    ck.append(("rsync -c", cmd("rsync", True)))
                if a.ferry_base:
                    ck.append(("ferry-base-serve -c", cmd("ferry-base-serve")))
                random.Random(100 + r).shuffle(ck)
                for name, c in ck:
                    timed("checksum", name, c, r)
        print()
        out = {"dir": base, "tree": a.tree, "files": len(paths), "bytes": total, "runs": a.runs,
               "sftp_server": a.sftp_server, "cells": []}
        for cell in dict.fromkeys(c for c, _ in results):
            names = [n for c, n in results if c == cell]
            if not names:
                continue
            med = {n: statistics.median(w for w, _, _ in results[(cell, n)]) for n in names}
            ref = "ferry-serve -c" if cell == "checksum" else "ferry"
            for n in sorted(names, key=lambda n: med[n]):
                ws = results[(cell, n)]
                row = {"cell": cell, "tool": n, "wall": [round(w, 3) for w, _, _ in ws],
                       "median_s": round(med[n], 3),
                       "client_cpu_median": round(statistics.median(c for _, c, _ in ws), 2),
                       "server_cpu_median": round(statistics.median(s for _, _, s in ws), 2),
                       "vs_ferry": round(med[n] / med[ref], 2) if ref in med and med[ref] > 0 else None}
                out["cells"].append(row)
                print(f"{cell:9} {n:15} median {med[n]:7.2f} s  ({row['vs_ferry']}x ferry's time)  "
                      f"client {row['client_cpu_median']} CPU-s  servers {row['server_cpu_median']} CPU-s  runs {row['wall']}")
        if a.json:
            json.dump(out, open(a.json, "w"), indent=1)
    finally:
        stop_all(procs, 5)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
