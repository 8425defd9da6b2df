#!/usr/bin/env python3
"""S3 uploads and downloads, ferry against the S3 tools, on loopback
(docs/internals/s3.md).

Starts its own versitygw (POSIX backend, plain HTTP on 127.0.0.1, free
port, own keys; objects are files under <dir>/gw/) and OpenSSH sshd, then
times, interleaved, N runs of each tool on each set:

  big-up      1 x 1 GiB, local file -> s3://bench/up/
  big-down    1 x 1 GiB, s3 -> local
  small-up    1,000 x 100 kB, local dir -> s3 (-r)
  small-down  1,000 x 100 kB, s3 -> local dir
  r2r         1 x 1 GiB from sshd (SFTP) -> s3, remote to remote

Tools: ferry, rclone (Debian's 1.60 here: run without AWS_CA_BUNDLE,
which it refuses), s5cmd and the AWS CLI where installed (r2r: ferry and
rclone only); with --ferry-base OLD, that build too as the tool
ferry-base (old against new in one run). Each run's output is removed
before the next (uploads by deleting the files under the bucket's
directory); one warm-up run of each is not counted. The tools' order is
shuffled each round: on ext4 a run right after another's output was
deleted pays for the deleted inodes (the allocator's `recently_deleted`),
so in a fixed order each tool paid for the one before it. The 1 GiB cells'
source is read back into the page cache before each run (not with
--no-warm). Wall seconds, CPU seconds of the client and of the server
(versitygw; for r2r also sshd with its reaped children).

Usage: bench/s3-bench.py --ferry target/release/ferry [--dir /var/tmp]
                         [--runs 5] [--only big-up,small-up] [--json out.json]
                         [--ferry-base OLD] [--tools ferry,ferry-base,rclone]
"""
import argparse, json, os, random, shutil, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from r2r import free_port, wait_port, cpu_of, stop_all  # noqa: E402

ACCESS, SECRET = "benchaccess", "benchsecret0123456789"

def run_timed(cmd, env=None):
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, ru.ru_utime + ru.ru_stime

def which(p):
    return shutil.which(p)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferry", required=True)
    ap.add_argument("--ferry-base", help="an older ferry, run as the tool ferry-base")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--small-count", type=int, default=1000)
    ap.add_argument("--only", default="big-up,big-down,small-up,small-down,r2r")
    ap.add_argument("--tools", default="ferry,rclone,s5cmd,aws")
    ap.add_argument("--ferry-args", default="", help="extra flags for every ferry run")
    ap.add_argument("--no-warm", action="store_true",
                    help="do not read the 1 GiB cells' source back into the cache before each run")
    ap.add_argument("--json")
    a = ap.parse_args()
    ferry = os.path.abspath(a.ferry)
    base = tempfile.mkdtemp(prefix="s3bench-", dir=a.dir)
    procs = []
    try:
        d = lambda *p: os.path.join(base, *p)
        for sub in ["gw/bench", "src/small", "down", "keys", "home", "sshd"]:
            os.makedirs(d(sub), exist_ok=True)
        # versitygw
        gp = free_port()
        vgw = which("versitygw") or "/usr/local/bin/versitygw"
        procs.append(subprocess.Popen([vgw, "--access", ACCESS, "--secret", SECRET, "--quiet",
                                       "--port", f"127.0.0.1:{gp}", "posix", d("gw")],
                                      stdout=subprocess.DEVNULL, stderr=open(d("gw.log"), "w")))
        gw_pid = procs[-1].pid
        # sshd (for r2r)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d("keys/id")], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d("keys/host")], check=True)
        shutil.copy(d("keys/id.pub"), d("keys/authorized_keys"))
        user = os.environ.get("USER") or "root"
        sp = free_port()
        open(d("sshd/config"), "w").write(
            f"Port {sp}\nListenAddress 127.0.0.1\nHostKey {d('keys/host')}\nAuthorizedKeysFile {d('keys/authorized_keys')}\n"
            f"PidFile {d('sshd/pid')}\nSubsystem sftp internal-sftp\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\n"
            "Ciphers aes128-gcm@openssh.com,chacha20-poly1305@openssh.com\n")
        procs.append(subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", d("sshd/config")], stderr=open(d("sshd/log"), "w")))
        sshd_pid = procs[-1].pid
        wait_port(gp, 30); wait_port(sp, 30)
        cfg = d("home/ssh_config")
        open(cfg, "w").write(f"Host sshd\n  HostName 127.0.0.1\n  Port {sp}\n  IdentityFile {d('keys/id')}\n  IdentitiesOnly yes\n"
                             f"  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  User {user}\n")
        endpoint = f"http://127.0.0.1:{gp}"
        env = dict(os.environ, HOME=d("home"), AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
                   AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1")
        env.pop("SSH_AUTH_SOCK", None)
        env.pop("AWS_CA_BUNDLE", None)  # plain HTTP; rclone 1.60 refuses to start with it set
        # data
        big = d("src/big.bin")
        with open(big, "wb") as f:
            for _ in range(a.big_mib):
                f.write(os.urandom(1 << 20))
        for i in range(a.small_count):
            with open(d(f"src/small/f{i:04}.bin"), "wb") as f:
                f.write(os.urandom(100_000))
        # objects to download, put there once with ferry
        subprocess.run([ferry, "cp", "-q", big, "s3://bench/ro/big.bin"], env=env, check=True)
        subprocess.run([ferry, "cp", "-q", "-r", d("src/small"), "s3://bench/ro/"], env=env, check=True)
        fa = a.ferry_args.split()
        # rclone remotes from the environment (a connection string would
        # need the endpoint's ':' quoted).
        rc_env = {"RCLONE_CONFIG_BS3_TYPE": "s3", "RCLONE_CONFIG_BS3_PROVIDER": "Other",
                  "RCLONE_CONFIG_BS3_ENDPOINT": endpoint, "RCLONE_CONFIG_BS3_ACCESS_KEY_ID": ACCESS,
                  "RCLONE_CONFIG_BS3_SECRET_ACCESS_KEY": SECRET, "RCLONE_CONFIG_BS3_REGION": "us-east-1",
                  # the bucket exists (a directory); versitygw answers 500 to creating it again
                  "RCLONE_CONFIG_BS3_NO_CHECK_BUCKET": "true",
                  "RCLONE_CONFIG_BSFTP_TYPE": "sftp", "RCLONE_CONFIG_BSFTP_HOST": "127.0.0.1",
                  "RCLONE_CONFIG_BSFTP_PORT": str(sp), "RCLONE_CONFIG_BSFTP_USER": user,
                  "RCLONE_CONFIG_BSFTP_KEY_FILE": d("keys/id"), "RCLONE_CONFIG_BSFTP_SHELL_TYPE": "none",
                  "RCLONE_CONFIG_BSFTP_DISABLE_HASHCHECK": "true"}
        rc_s3, rc_sftp = "bs3:", "bsftp:"
        tools = a.tools.split(",")
        if a.ferry_base and "ferry-base" not in tools:
            tools.insert(1, "ferry-base")
        base_bin = os.path.abspath(a.ferry_base) if a.ferry_base else None
        have = {"ferry": True, "ferry-base": bool(base_bin), "rclone": bool(which("rclone")), "s5cmd": bool(which("s5cmd")), "aws": bool(which("aws"))}
        def cmds(case, tool):
            if tool == "ferry-base":
                c = cmds(case, "ferry")
                return c and [base_bin, *c[1:]]
            up, dn = "s3://bench/up", d("down")
            if case == "big-up":
                return {"ferry": [ferry, "cp", "-q", *fa, big, f"{up}/big.bin"],
                        "rclone": ["rclone", "copyto", big, f"{rc_s3}bench/up/big.bin"],
                        "s5cmd": ["s5cmd", "--endpoint-url", endpoint, "cp", big, f"{up}/big.bin"],
                        "aws": ["aws", "--endpoint-url", endpoint, "s3", "cp", "--only-show-errors", big, f"{up}/big.bin"]}.get(tool)
            if case == "big-down":
                return {"ferry": [ferry, "cp", "-q", *fa, "s3://bench/ro/big.bin", f"{dn}/big.bin"],
                        "rclone": ["rclone", "copyto", f"{rc_s3}bench/ro/big.bin", f"{dn}/big.bin"],
                        "s5cmd": ["s5cmd", "--endpoint-url", endpoint, "cp", "s3://bench/ro/big.bin", f"{dn}/big.bin"],
                        "aws": ["aws", "--endpoint-url", endpoint, "s3", "cp", "--only-show-errors", "s3://bench/ro/big.bin", f"{dn}/big.bin"]}.get(tool)
            if case == "small-up":
                return {"ferry": [ferry, "cp", "-q", "-r", *fa, d("src/small"), f"{up}/"],
                        "rclone": ["rclone", "copy", d("src/small"), f"{rc_s3}bench/up/small"],
                        "s5cmd": ["s5cmd", "--endpoint-url", endpoint, "cp", d("src/small") + "/", f"{up}/small/"],
                        "aws": ["aws", "--endpoint-url", endpoint, "s3", "cp", "--only-show-errors", "--recursive", d("src/small"), f"{up}/small/"]}.get(tool)
            if case == "small-down":
                return {"ferry": [ferry, "cp", "-q", "-r", *fa, "s3://bench/ro/small", f"{dn}/small"],
                        "rclone": ["rclone", "copy", f"{rc_s3}bench/ro/small", f"{dn}/small"],
                        "s5cmd": ["s5cmd", "--endpoint-url", endpoint, "cp", "s3://bench/ro/small/*", f"{dn}/small/"],
                        "aws": ["aws", "--endpoint-url", endpoint, "s3", "cp", "--only-show-errors", "--recursive", "s3://bench/ro/small/", f"{dn}/small/"]}.get(tool)
            if case == "r2r":
                return {"ferry": [ferry, "cp", "-q", "-F", cfg, *fa, f"sftp://sshd{big}", f"{up}/big.bin"],
                        "rclone": ["rclone", "copyto", f"{rc_sftp}{big}", f"{rc_s3}bench/up/big.bin"]}.get(tool)
        def clean():
            shutil.rmtree(d("gw/bench/up"), ignore_errors=True)
            shutil.rmtree(d("gw/bench/.sgwtmp"), ignore_errors=True)
            shutil.rmtree(d("down"), ignore_errors=True)
            os.makedirs(d("down"))
            # Write the deletions back before the next run: ext4 without a
            # journal (this VM's disk) skips the free inodes deleted in the
            # last minutes, longer while their inode-table block is not
            # written back, and that walk (`recently_deleted`, ~30% of a
            # small download's samples) made each run slower than the one
            # before (BENCHMARKS.md, run tmpfile-1). Written back it is
            # shorter, not gone: use a journaled ext4 for --dir
            # (docs/internals/bench.md).
            os.sync()
        def warm(case):
            # The 1 GiB cells read their source from the page cache, for
            # every tool alike: before each run it is read back (a run's
            # output pushed nothing out here, but the bench does not rely
            # on that). This does not even out the VM's memory: a 1 GiB
            # download into the page cache is 0.6 s or 1.2-2.5 s by whether
            # the kernel's pages for it were touched since this VM gave
            # them back to its host (BENCHMARKS.md, run s3-turn-1); compare
            # tools over many interleaved runs.
            if case not in ("big-down", "big-up", "r2r") or a.no_warm:
                return
            src = d("gw/bench/ro/big.bin") if case == "big-down" else big
            with open(src, "rb") as f:
                while f.read(1 << 24):
                    pass
        cases = a.only.split(",")
        variants = [(c, t) for c in cases for t in tools if have.get(t) and cmds(c, t)]
        print(f"# {len(variants)} variants, {a.runs} runs each (+1 warm-up); load: {os.getloadavg()}", flush=True)
        res = {}
        shuffle = random.Random(7)
        for run in range(a.runs + 1):
            order = list(variants)
            shuffle.shuffle(order)
            for case, tool in order:
                clean()
                warm(case)
                e = env if tool != "rclone" else dict({k: v for k, v in env.items() if not k.startswith("AWS_")}, **rc_env)
                srv0 = cpu_of(gw_pid) + (cpu_of(sshd_pid, True) if case == "r2r" else 0)
                wall, ccpu = run_timed(cmds(case, tool), e)
                if case == "r2r":
                    time.sleep(0.3)  # let sshd reap its session
                scpu = cpu_of(gw_pid) + (cpu_of(sshd_pid, True) if case == "r2r" else 0) - srv0
                if run > 0:
                    res.setdefault(f"{case} {tool}", []).append((wall, ccpu, scpu))
                print(f"  run {run} {case:10} {tool:6} {wall:7.2f} s  client {ccpu:6.2f} CPU-s  server {scpu:6.2f} CPU-s", flush=True)
        clean()
        print("\n| set | tool | wall s (median) | runs | client CPU-s | server CPU-s | vs ferry |")
        print("|---|---|---|---|---|---|---|")
        out = {}
        for case in cases:
            fw = statistics.median(w for w, _, _ in res.get(f"{case} ferry", [(0, 0, 0)]))
            for tool in tools:
                r = res.get(f"{case} {tool}")
                if not r:
                    continue
                w = statistics.median(x[0] for x in r)
                c = statistics.median(x[1] for x in r)
                s = statistics.median(x[2] for x in r)
                out[f"{case} {tool}"] = {"wall": [x[0] for x in r], "client_cpu": [x[1] for x in r], "server_cpu": [x[2] for x in r]}
                print(f"| {case} | {tool} | {w:.2f} | {', '.join(f'{x[0]:.2f}' for x in r)} | {c:.2f} | {s:.2f} | {w / fw if fw else 0:.2f}x |")
        if a.json:
            json.dump(out, open(a.json, "w"), indent=1)
    finally:
        stop_all(procs)
        shutil.rmtree(base, ignore_errors=True)

if __name__ == "__main__":
    main()
