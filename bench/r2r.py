#!/usr/bin/env python3
"""Remote-to-remote copies, measured side by side (docs/internals/engine.md).

Starts its own OpenSSH sshd, ferry serve and nginx on 127.0.0.1 (free
ports, own config, stopped by PID), then times, interleaved, N runs of:

  sftp2sftp  512 MiB from sshd to ferry serve (SFTP to SFTP):
    ferry        ferry cp sftp://sshd/f sftp://serve/f          (one step)
    two-step     ferry cp sshd -> local file, then local -> ferry serve
    rclone       rclone copy between the two SFTP remotes
  https2sftp  100 x 1 MB from nginx (HTTPS) to sshd:
    ferry        ferry cp -r https://nginx/set/ sftp://sshd/dir  (one step)
    two-step     ferry cp -r nginx -> local dir, then local -> sshd

Each run's output is removed before the next; one warm-up run of each
variant is not counted. Wall seconds, and CPU seconds of the client and of
the servers (sshd's reaped children, ferry serve, nginx's workers).

Usage: bench/r2r.py --ferry target/release/ferry [--dir /var/tmp/r2r]
                    [--runs 5] [--size-mib 512] [--sftp-server internal-sftp]
                    [--json out.json]
"""
import argparse, json, os, random, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(port, t=20):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close(); return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")

def cpu_of(pid, children=False):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    t = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if children else 0)
    return t / os.sysconf("SC_CLK_TCK")

def tree_pids(pid):
    out = [pid]
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(pid):
                    out += tree_pids(int(p))
            except OSError:
                pass
    return out

def run_timed(cmd, env=None):
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    if err.strip():
        print(f"  stderr of {os.path.basename(cmd[0])}: {err.strip()[:600]}", flush=True)
    return wall, ru.ru_utime + ru.ru_stime

def stop_all(procs, wait=10):
    """Stop the servers a bench started: SIGTERM to each, then SIGKILL to
    any still running after `wait` seconds."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            p.kill()

def start_sshd(d, sftp_server, extra=""):
    """Keys in d("keys"), an sshd as the current user on a free port with
    its config, pid and log in d("sshd"): (port, process)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d("keys/id")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d("keys/host")], check=True)
    shutil.copy(d("keys/id.pub"), d("keys/authorized_keys"))
    sp = free_port()
    sftp = sftp_server if sftp_server == "internal-sftp" else "/usr/lib/openssh/sftp-server"
    open(d("sshd/config"), "w").write(
        f"Port {sp}\nListenAddress 127.0.0.1\nHostKey {d('keys/host')}\nAuthorizedKeysFile {d('keys/authorized_keys')}\n"
        f"PidFile {d('sshd/pid')}\nSubsystem sftp {sftp}\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
        "Ciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com\n" + extra)
    return sp, subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", d("sshd/config")], stderr=open(d("sshd/log"), "w"))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--sftp-server", default="internal-sftp")
    ap.add_argument("--only", default="sftp2sftp,https2sftp")
    ap.add_argument("--json")
    ap.add_argument("--ferry-args", default="", help="extra flags: adds a 'ferry+' variant of each one-step copy")
    a = ap.parse_args()
    ferry = os.path.abspath(a.ferry)
    base = tempfile.mkdtemp(prefix="r2r-", dir=a.dir)
    os.chmod(base, 0o755)  # nginx workers read www/ as another user
    procs = []
    try:
        d = lambda *p: os.path.join(base, *p)
        for sub in ["sshd", "serve/root", "serve/state", "local", "nginx/www/set", "nginx/tmp", "keys", "home"]:
            os.makedirs(d(sub), exist_ok=True)
        user = os.environ.get("USER") or "root"
        sp, sshd = start_sshd(d, a.sftp_server)
        procs.append(sshd)
        sshd_pid = sshd.pid
        # ferry serve
        fp, hp = free_port(), free_port()
        procs.append(subprocess.Popen([ferry, "serve", d("serve/root"), "--writable", "--sftp", f"127.0.0.1:{fp}",
                                       "--https", f"127.0.0.1:{hp}", "--state-dir", d("serve/state"),
                                       "--authorized-keys", d("keys/authorized_keys")],
                                      stdout=subprocess.DEVNULL, stderr=open(d("serve/log"), "w")))
        serve_pid = procs[-1].pid
        # nginx
        np_ = free_port()
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", d("nginx/key.pem"), "-out", d("nginx/cert.pem"), "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        open(d("nginx/conf"), "w").write(
            f"worker_processes 1;\npid {d('nginx/pid')};\nerror_log {d('nginx/error.log')};\ndaemon off;\n"
            f"events {{}}\nhttp {{ access_log off; client_body_temp_path {d('nginx/tmp')}; proxy_temp_path {d('nginx/tmp')};\n"
            f" fastcgi_temp_path {d('nginx/tmp')}; uwsgi_temp_path {d('nginx/tmp')}; scgi_temp_path {d('nginx/tmp')};\n"
            f" sendfile on; server {{ listen 127.0.0.1:{np_} ssl http2; ssl_certificate {d('nginx/cert.pem')};\n"
            f" ssl_certificate_key {d('nginx/key.pem')}; root {d('nginx/www')}; autoindex on; }} }}\n")
        procs.append(subprocess.Popen(["/usr/sbin/nginx", "-c", d("nginx/conf"), "-p", d("nginx")], stderr=open(d("nginx/log"), "w")))
        nginx_pid = procs[-1].pid
        for p in (sp, fp, hp, np_):
            wait_port(p)
        cfg = d("home/ssh_config")
        common = "  IdentityFile {k}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  User {u}\n".format(k=d("keys/id"), u=user)
        open(cfg, "w").write(f"Host sshd\n  HostName 127.0.0.1\n  Port {sp}\n{common}Host serve\n  HostName 127.0.0.1\n  Port {fp}\n{common}")
        env = dict(os.environ, HOME=d("home"))
        env.pop("SSH_AUTH_SOCK", None)
        env_rclone = dict(env); env_rclone.pop("AWS_CA_BUNDLE", None)
        fc = [ferry, "cp", "-q", "-F", cfg]
        # data
        big = d("sshd/big.bin")
        with open(big, "wb") as f:
            for _ in range(a.size_mib):
                f.write(os.urandom(1 << 20))
        for i in range(100):
            with open(d(f"nginx/www/set/f{i:03}.bin"), "wb") as f:
                f.write(os.urandom(1_000_000))
        def rclone_remote(port):
            return (f":sftp,host=127.0.0.1,port={port},user={user},key_file={d('keys/id')},"
                    f"shell_type=none,disable_hashcheck=true:")
        def clean():
            for p in [d("serve/root/big.bin"), d("local/big.bin")]:
                if os.path.exists(p): os.remove(p)
            for p in [d("sshd/set"), d("local/set")]:
                shutil.rmtree(p, ignore_errors=True)
        variants = []
        if "sftp2sftp" in a.only:
            variants += [
                ("sftp2sftp", "ferry", [fc + [f"sftp://sshd{big}", "sftp://serve/big.bin"]]),
                ("sftp2sftp", "two-step", [fc + [f"sftp://sshd{big}", d("local/big.bin")],
                                           fc + [d("local/big.bin"), "sftp://serve/big.bin"]]),
            ]
            if a.ferry_args:
                variants.append(("sftp2sftp", "ferry+", [fc + a.ferry_args.split() + [f"sftp://sshd{big}", "sftp://serve/big.bin"]]))
            if shutil.which("rclone"):
                variants.append(("sftp2sftp", "rclone", [["rclone", "copyto", "-q", "--config", "/dev/null",
                                                          f"{rclone_remote(sp)}{big}", f"{rclone_remote(fp)}/big.bin"]]))
        if "https2sftp" in a.only:
            url = f"https://127.0.0.1:{np_}/set/"
            hc = fc + ["--cacert", d("nginx/cert.pem"), "-r"]
            variants += [
                ("https2sftp", "ferry", [hc + [url, f"sftp://sshd{d('sshd/set')}"]]),
                ("https2sftp", "two-step", [hc + [url, d("local/set")],
                                            fc + ["-r", d("local/set"), f"sftp://sshd{d('sshd/set')}"]]),
            ]
        servers = lambda: (cpu_of(sshd_pid, True) + cpu_of(serve_pid) + sum(cpu_of(p) for p in tree_pids(nginx_pid)))
        results = {}
        for r in range(a.runs + 1):
            order = list(variants)
            random.Random(r).shuffle(order)
            for (cell, name, cmds) in order:
                clean()
                s0 = servers(); wall = cpu = 0.0
                for c in cmds:
                    w, u = run_timed(c, env_rclone if c[0] == "rclone" else env)
                    wall += w; cpu += u
                srv = servers() - s0
                if r == 0:
                    continue  # warm-up
                results.setdefault((cell, name), []).append((wall, cpu, srv))
                print(f"run {r} {cell:10} {name:9} {wall:7.2f} s  client {cpu:5.2f} CPU-s  servers {srv:5.2f} CPU-s", flush=True)
        clean()
        print()
        out = {"dir": base, "runs": a.runs, "size_mib": a.size_mib, "sftp_server": a.sftp_server, "cells": []}
        for cell in sorted({c for c, _ in results}):
            names = [n for c, n in results if c == cell]
            med = {n: statistics.median(w for w, _, _ in results[(cell, n)]) for n in names}
            for n in names:
                ws = results[(cell, n)]
                row = {"cell": cell, "client": n, "wall": [round(w, 3) for w, _, _ in ws],
                       "median_s": round(med[n], 3),
                       "client_cpu_median": round(statistics.median(c for _, c, _ in ws), 2),
                       "server_cpu_median": round(statistics.median(s for _, _, s in ws), 2),
                       "vs_ferry": round(med[n] / med["ferry"], 2) if "ferry" in med else None}
                out["cells"].append(row)
                print(f"{cell:10} {n:9} median {med[n]:6.2f} s  ({row['vs_ferry']}x ferry's time)  client {row['client_cpu_median']} CPU-s  servers {row['server_cpu_median']} CPU-s  runs {row['wall']}")
        if a.json:
            json.dump(out, open(a.json, "w"), indent=1)
    except SystemExit:
        for name in ["sshd/log", "serve/log", "nginx/log", "nginx/error.log"]:
            try:
                print(f"--- {name}\n" + open(os.path.join(base, name)).read()[-1500:], file=sys.stderr)
            except OSError:
                pass
        raise
    finally:
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM); p.wait(10)
            except Exception:
                p.kill()
        shutil.rmtree(base, ignore_errors=True)

if __name__ == "__main__":
    main()
