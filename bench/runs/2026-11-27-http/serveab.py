#!/usr/bin/env python3
"""1 GiB up/down over HTTPS to ferry serve (new server), client builds interleaved; ext4.
usage: serveab.py RUNS SERVER_BIN name=BIN..."""
import importlib.util, os, sys, shutil, statistics, tempfile, subprocess, time, socket
from pathlib import Path
spec = importlib.util.spec_from_file_location("hb", "/work/main/bench/http-bench.py")
hb = importlib.util.module_from_spec(spec); spec.loader.exec_module(hb)
runs = int(sys.argv[1]); server = sys.argv[2]; bins = [a.split("=", 1) for a in sys.argv[3:]]
base = Path(tempfile.mkdtemp(prefix="svab-", dir="/var/tmp"))
root = base / "root"; root.mkdir(); state = base / "state"; local = base / "local"; local.mkdir()
with open(root / "big.bin", "wb") as f:
    for _ in range(1024): f.write(os.urandom(1 << 20))
shutil.copy(root / "big.bin", local / "up.bin")
port = hb.free_port()
srv = subprocess.Popen([server, "serve", str(root), "--writable", "--no-sftp" if False else "--https", f"127.0.0.1:{port}",
                        "--sftp", f"127.0.0.1:{hb.free_port()}", "--state-dir", str(state), "--token", "t0k"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
hb.CHILDREN.append(srv)
for _ in range(200):
    try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
    except OSError: time.sleep(0.05)
certs = list(state.glob("*.pem")) + list(state.glob("*.crt"))
cert = [c for c in certs if "key" not in c.name][0]
try:
    res = {}
    for r in range(runs + 1):
        for name, b in bins:
            for d in ["down", "up"]:
                for p in [local / "got.bin", root / "up.bin"]:
                    if p.exists(): p.unlink()
                src, dst = (f"https://127.0.0.1:{port}/big.bin", str(local / "got.bin")) if d == "down" else (str(local / "up.bin"), f"https://127.0.0.1:{port}/up.bin")
                w, c = hb.timed([b, "cp", "-q", "--cacert", str(cert), "--token", "t0k", src, dst])
                if r: res.setdefault((name, d), []).append((w, c))
    for k, v in sorted(res.items()):
        print(k, "wall", round(statistics.median(x[0] for x in v), 3), "cpu", round(statistics.median(x[1] for x in v), 3), [round(x[1], 2) for x in v], flush=True)
finally:
    hb.stop_all(); shutil.rmtree(base, ignore_errors=True)
