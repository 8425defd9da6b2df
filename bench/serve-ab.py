#!/usr/bin/env python3
"""Two ferry serve builds side by side: one client build downloads (or
uploads) the same set from each, interleaved (docs/internals/server.md,
BENCHMARKS.md).

`ferry bench --baseline` runs two client builds against one server; a
change to ferry serve needs the other way round. Starts both servers on
127.0.0.1 (free ports, own state directories and keys, stopped by PID),
each with its own copy of the set, and times `ferry cp -r` against each
in turn, N runs after one warm-up run, the output removed before each
run (on ext4 the order alternates, so that neither build always follows
the other's deletions). Wall seconds, the client's CPU seconds and the
server's (utime + stime from /proc).

Usage: bench/serve-ab.py --client NEW/ferry --serve-a OLD/ferry --serve-b NEW/ferry
         [--proto sftp|https] [--direction download|upload] [--files 1000]
         [--size 20000] [--runs 9] [--dir /var/tmp]
"""
import argparse, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from r2r import cpu_of, stop_all  # noqa: E402


def start(serve, root, state, keys):
    p = subprocess.Popen([serve, "serve", root, "--writable", "--sftp", "127.0.0.1:0",
                          "--https", "127.0.0.1:0", "--state-dir", state,
                          "--authorized-keys", keys],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    info = {}
    for line in p.stdout:
        k, _, v = line.strip().partition(" ")
        if k == "ready":
            break
        info[k] = v
    return p, info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True)
    ap.add_argument("--serve-a", required=True)
    ap.add_argument("--serve-b", required=True)
    ap.add_argument("--proto", default="sftp", choices=["sftp", "https"])
    ap.add_argument("--direction", default="download", choices=["download", "upload"])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--dir", default="/var/tmp")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="serveab-", dir=a.dir)
    procs = []
    try:
        d = lambda *p: os.path.join(base, *p)
        os.makedirs(d("keys")); os.makedirs(d("home")); os.makedirs(d("src/set"))
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d("keys/id")], check=True)
        shutil.copy(d("keys/id.pub"), d("keys/authorized_keys"))
        data = os.urandom(a.size * a.files)
        for i in range(a.files):
            for root in ["src/set", "A/set", "B/set"]:
                os.makedirs(d(root), exist_ok=True)
                with open(d(root, f"f{i:05}.bin"), "wb") as f:
                    f.write(data[i * a.size:(i + 1) * a.size])
        servers = {}
        for name, exe in [("A", a.serve_a), ("B", a.serve_b)]:
            p, info = start(os.path.abspath(exe), d(name), d(f"state-{name}"), d("keys/authorized_keys"))
            procs.append(p)
            servers[name] = (p, info)
        cfg = d("home/ssh_config")
        with open(cfg, "w") as f:
            for name, (_, info) in servers.items():
                port = info["sftp"].rsplit(":", 1)[1]
                f.write(f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  IdentityFile {d('keys/id')}\n"
                        "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
                        f"  User {os.environ.get('USER') or 'root'}\n  LogLevel ERROR\n")
        env = dict(os.environ, HOME=d("home"))
        env.pop("SSH_AUTH_SOCK", None)

        def cmd(name):
            _, info = servers[name]
            if a.proto == "sftp":
                remote, opts = f"sftp://{name}", ["-F", cfg]
            else:
                remote = f"https://{info['https']}"
                opts = ["--pin", info["cert"], "--token", info["token"]]
            if a.direction == "download":
                return [a.client, "cp", "-q", "-r", *opts, f"{remote}/set", d("out") + "/"]
            return [a.client, "cp", "-q", "-r", *opts, d("src/set"), f"{remote}/up/"]

        def clean(name):
            shutil.rmtree(d("out"), ignore_errors=True)
            os.makedirs(d("out"))
            shutil.rmtree(d(name, "up"), ignore_errors=True)

        res = {"A": [], "B": []}
        for run in range(a.runs + 1):
            for name in (["A", "B"] if run % 2 == 0 else ["B", "A"]):
                clean(name)
                pid = servers[name][0].pid
                s0 = cpu_of(pid)
                t0 = time.time()
                p = subprocess.Popen(cmd(name), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                _, status, ru = os.wait4(p.pid, 0)
                wall = time.time() - t0
                if os.waitstatus_to_exitcode(status) != 0:
                    sys.exit(f"failed: {' '.join(cmd(name))}\n{p.stderr.read().decode()}")
                time.sleep(0.05)
                srv = cpu_of(pid) - s0
                got = d("out", "set") if a.direction == "download" else d(name, "up", "set")
                n = len(os.listdir(got))
                if n != a.files:
                    sys.exit(f"{name}: {n} files arrived, not {a.files}")
                if run > 0:
                    res[name].append((wall, ru.ru_utime + ru.ru_stime, srv))
                print(f"run {run} {name} {wall:6.3f} s  client {ru.ru_utime + ru.ru_stime:5.2f} CPU-s  server {srv:5.2f} CPU-s", flush=True)
        print(f"\n{a.proto} {a.direction}, {a.files} x {a.size} B, {a.runs} runs; A = {a.serve_a}, B = {a.serve_b}")
        for name in ["A", "B"]:
            r = res[name]
            print(f"{name}: wall {statistics.median(x[0] for x in r):.3f} s  client {statistics.median(x[1] for x in r):.2f} CPU-s"
                  f"  server {statistics.median(x[2] for x in r):.2f} CPU-s  runs {[round(x[0], 3) for x in r]}")
    finally:
        stop_all(procs)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
