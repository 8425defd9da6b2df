#!/usr/bin/env python3
"""Interleaved A/B of ferry builds: `ab.py ROUNDS SRC DSTDIR name=bin ...`
(sshd of /var/tmp/bed). Wall, client CPU, whole-machine CPU (from /proc/stat)."""
import os, random, resource, shutil, statistics, subprocess, sys, time
rounds, src, dst = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tools = dict(a.split("=", 1) for a in sys.argv[4:])
extra = os.environ.get("ARGS", "").split()
def stat():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)
res = {t: [] for t in tools}
def clean():
    p = os.path.join(dst, "x")
    if os.path.isdir(p): shutil.rmtree(p)
    elif os.path.exists(p): os.remove(p)
for r in range(rounds + 1):
    order = list(tools); random.shuffle(order)
    for t in order:
        clean(); subprocess.run(["sync"])
        time.sleep(0.3)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        b0, t0 = stat(); w0 = time.time()
        target = os.environ.get("HOST", "bed") + ":" + os.environ.get("RPATH", os.path.join(dst, "x"))
        p = subprocess.run([tools[t], "cp", "-q", "-F", "/var/tmp/bed/home/ssh_config", *extra, src, target])
        w = time.time() - w0; b1, t1 = stat()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        if p.returncode: print(t, "FAILED", p.returncode)
        if r > 0: res[t].append((w, cpu, (b1 - b0) / os.sysconf("SC_CLK_TCK")))
clean()
for t, v in res.items():
    w = [x[0] for x in v]; c = [x[1] for x in v]; m = [x[2] for x in v]
    print(f"{t:10} wall {statistics.median(w):.3f} s ({min(w):.3f}-{max(w):.3f})  client CPU {statistics.median(c):.3f} s  machine CPU {statistics.median(m):.2f} s")
