#!/usr/bin/env python3
"""abc.py ROUNDS name=BIN ... : big-tree sync to sshd, interleaved; wall, client CPU, whole-machine busy CPU."""
import os, sys, subprocess, random, time, statistics, resource
os.environ["HOME"] = "/var/tmp/bt/home"; os.environ.pop("SSH_AUTH_SOCK", None)
os.chdir("/var/tmp/bt")
R = int(sys.argv[1]); builds = [a.split("=", 1) for a in sys.argv[2:]]
extra = os.environ.get("EXTRA", "").split()
src = os.environ.get("SRC", "src")
def busy():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f)); return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
res = {n: [] for n, _ in builds}
for r in range(R):
    random.shuffle(builds)
    for n, b in builds:
        subprocess.run(["rm", "-rf", "sshd/dst"]); subprocess.run(["sync"]); time.sleep(3)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN); b0 = busy(); t0 = time.time()
        p = subprocess.run([b, "sync", "-q", *extra, "-F", "home/ssh_config", src, "sftp://sshd/var/tmp/bt/sshd/dst"], capture_output=True, text=True)
        t = time.time() - t0; b1 = busy(); r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if p.returncode: print("FAIL", n, p.stderr[-300:])
        res[n].append((t, cli, b1 - b0))
        print(f"{n} {t:.2f} s client {cli:.2f} all {b1-b0:.2f}", flush=True)
for n in res:
    w = [x[0] for x in res[n]]; c = [x[1] for x in res[n]]; a = [x[2] for x in res[n]]
    print(f"== {n}: wall median {statistics.median(w):.2f} (min {min(w):.2f}), client cpu {statistics.median(c):.2f}, all cpu {statistics.median(a):.2f}")
