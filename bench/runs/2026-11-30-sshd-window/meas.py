#!/usr/bin/env python3
# meas.py LABEL -- CMD...: run CMD in the client namespace (or, with SPID=pidfile of a loopback sshd, here); print wall, client CPU, sshd tree CPU and page faults.
import os, sys, time, subprocess, resource, shutil, json
D = "/var/tmp/wan/bed"
TCK = os.sysconf("SC_CLK_TCK")
def tree(pid, fields=(11, 15)):
    tot, st = 0, [pid]
    while st:
        p = st.pop()
        try:
            s = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tot += sum(int(x) for x in s[fields[0]:fields[1]])
        for t in os.listdir(f"/proc/{p}/task"):
            try:
                st += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
            except OSError:
                pass
    return tot / TCK if fields == (11, 15) else tot
label = sys.argv[1]; cmd = sys.argv[3:]
spid = int(open(os.environ.get("SPID", f"{D}/sshd.pid2")).read())
dst = "/var/tmp/wan/dst"
shutil.rmtree(dst, ignore_errors=True); os.makedirs(dst); os.sync()
s0 = tree(spid); f0 = tree(spid, (7, 11)); r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.monotonic()
rc = subprocess.call((["ip", "netns", "exec", "ferry-w-c"] if not os.environ.get("SPID") else []) + cmd)
wall = time.monotonic() - t0
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
time.sleep(1.0)
s1 = tree(spid); f1 = tree(spid, (7, 11))
cli = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
size = sum(os.path.getsize(os.path.join(a, f)) for a, _, fs in os.walk(dst) for f in fs)
print(json.dumps({"label": label, "rc": rc, "wall": round(wall, 2), "MBps": round(size / wall / 1e6, 1), "cli": round(cli, 2), "sshd": round(s1 - s0, 2), "sshd_minflt_k": (f1 - f0) // 1000, "bytes": size}), flush=True)
shutil.rmtree(dst, ignore_errors=True)
