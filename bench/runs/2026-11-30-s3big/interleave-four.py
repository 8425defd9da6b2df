"""By-hand interleaving of 1 GiB S3 downloads (run s3-turn-1 in BENCHMARKS.md).
Assumes versitygw on 127.0.0.1:7071 (keys AK / SKSKSKSK, POSIX store /mnt/jext4/gw2,
object bench/ro/big.bin) and the ferry builds at the paths below. Usage: python3 FILE ROUNDS"""
import os, sys, subprocess, time, shutil, statistics, random
F="/var/tmp/ferry-s52a"
env = dict(os.environ, AWS_ACCESS_KEY_ID="AK", AWS_SECRET_ACCESS_KEY="SKSKSKSK", AWS_ENDPOINT_URL="http://127.0.0.1:7071", AWS_REGION="us-east-1")
env.pop("AWS_CA_BUNDLE", None)
rc = dict({k: v for k, v in env.items() if not k.startswith("AWS_")}, RCLONE_CONFIG_BS3_TYPE="s3", RCLONE_CONFIG_BS3_PROVIDER="Other", RCLONE_CONFIG_BS3_ENDPOINT="http://127.0.0.1:7071", RCLONE_CONFIG_BS3_ACCESS_KEY_ID="AK", RCLONE_CONFIG_BS3_SECRET_ACCESS_KEY="SKSKSKSK", RCLONE_CONFIG_BS3_REGION="us-east-1")
D="/mnt/jext4/dl3/big.bin"
tools = {"p128": (["/var/tmp/ferry-s52p128", "cp", "-q", "s3://bench/ro/big.bin", D], env), "new": (["/var/tmp/ferry-s52b", "cp", "-q", "s3://bench/ro/big.bin", D], env), "ferry": ([F, "cp", "-q", "s3://bench/ro/big.bin", D], env),
         "s5cmd": (["s5cmd", "--endpoint-url", "http://127.0.0.1:7071", "cp", "s3://bench/ro/big.bin", D], env),
         }
def run_timed(cmd, e):
    t0 = time.time()
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    assert status == 0, p.stderr.read()
    return time.time() - t0, ru.ru_utime + ru.ru_stime
res = {}
for i in range(int(sys.argv[1]) + 1):
    order = list(tools); random.Random(i).shuffle(order)
    for t in order:
        shutil.rmtree("/mnt/jext4/dl3", ignore_errors=True); os.makedirs("/mnt/jext4/dl3"); os.sync()
        with open("/mnt/jext4/gw2/bench/ro/big.bin", "rb") as f:
            while f.read(1 << 24): pass
        w, c = run_timed(*tools[t])
        print(i, t, f"{w:.2f} s {c:.2f} cpu", flush=True)
        if i: res.setdefault(t, []).append(w)
for t, ws in res.items():
    print(t, "median", f"{statistics.median(ws):.2f}", " ".join(f"{w:.2f}" for w in ws))
