"""By-hand interleaving of 1 GiB S3 downloads (run s3-turn-1 in BENCHMARKS.md).

Assumes versitygw on 127.0.0.1:7071 (keys AK / SKSKSKSK, POSIX store
/mnt/jext4/gw2, object bench/ro/big.bin), the destination /mnt/jext4/dl3.
Each run: the destination emptied and `sync`ed, the object's file read back
into the cache, then one tool, timed (wall, and the child's CPU).

Usage: python3 interleave.py ROUNDS NAME=FERRY_BINARY... [s5cmd] [rclone]
e.g.   python3 interleave.py 9 old=/var/tmp/ferry-s52a turn=/var/tmp/ferry-s52c s5cmd
(four-ab.txt: old, new, p128 and s5cmd; turn-pool-ab.txt: old, new, turn and s5cmd;
by-hand-7.txt and piece128-ab.txt: with rclone too.)
"""
import os, sys, subprocess, time, shutil, statistics, random

EP = "http://127.0.0.1:7071"
env = dict(os.environ, AWS_ACCESS_KEY_ID="AK", AWS_SECRET_ACCESS_KEY="SKSKSKSK",
           AWS_ENDPOINT_URL=EP, AWS_REGION="us-east-1")
env.pop("AWS_CA_BUNDLE", None)
rc = dict({k: v for k, v in env.items() if not k.startswith("AWS_")},
          RCLONE_CONFIG_BS3_TYPE="s3", RCLONE_CONFIG_BS3_PROVIDER="Other", RCLONE_CONFIG_BS3_ENDPOINT=EP,
          RCLONE_CONFIG_BS3_ACCESS_KEY_ID="AK", RCLONE_CONFIG_BS3_SECRET_ACCESS_KEY="SKSKSKSK",
          RCLONE_CONFIG_BS3_REGION="us-east-1")
D = "/mnt/jext4/dl3/big.bin"
SRC = "/mnt/jext4/gw2/bench/ro/big.bin"
tools = {}
for arg in sys.argv[2:]:
    if arg == "s5cmd":
        tools[arg] = (["s5cmd", "--endpoint-url", EP, "cp", "s3://bench/ro/big.bin", D], env)
    elif arg == "rclone":
        tools[arg] = (["rclone", "copyto", "bs3:bench/ro/big.bin", D], rc)
    else:
        name, binary = arg.split("=", 1)
        tools[name] = ([binary, "cp", "-q", "s3://bench/ro/big.bin", D], env)


def run_timed(cmd, e):
    t0 = time.time()
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    assert status == 0, p.stderr.read()
    return time.time() - t0, ru.ru_utime + ru.ru_stime


res = {}
for i in range(int(sys.argv[1]) + 1):  # round 0 is a warm-up, not counted
    order = list(tools)
    random.Random(i).shuffle(order)
    for t in order:
        shutil.rmtree(os.path.dirname(D), ignore_errors=True)
        os.makedirs(os.path.dirname(D))
        os.sync()
        with open(SRC, "rb") as f:
            while f.read(1 << 24):
                pass
        w, c = run_timed(*tools[t])
        print(i, t, f"{w:.2f} s {c:.2f} cpu", flush=True)
        if i:
            res.setdefault(t, []).append(w)
for t, ws in res.items():
    print(t, "median", f"{statistics.median(ws):.2f}", " ".join(f"{w:.2f}" for w in ws))
