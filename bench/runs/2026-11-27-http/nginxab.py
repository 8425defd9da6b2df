#!/usr/bin/env python3
"""Client CPU of 1 GiB down from nginx (h2), ferry builds interleaved + curl; ext4.
usage: nginxab.py RUNS BIN... (name=path)"""
import importlib.util, os, sys, shutil, statistics, tempfile
from pathlib import Path
spec = importlib.util.spec_from_file_location("hb", "/work/main/bench/http-bench.py")
hb = importlib.util.module_from_spec(spec); spec.loader.exec_module(hb)
runs = int(sys.argv[1]); bins = [a.split("=", 1) for a in sys.argv[2:]]
base = Path(tempfile.mkdtemp(prefix="ngab-", dir="/var/tmp"))
www = base / "www"; www.mkdir(); (base / "ng").mkdir()
with open(www / "big.bin", "wb") as f:
    for _ in range(1024): f.write(os.urandom(1 << 20))
try:
    https, _ = hb.start_nginx(base / "ng", www)
    cert = str(base / "ng" / "cert.pem")
    url = f"https://127.0.0.1:{https}/big.bin"
    out = base / "got.bin"
    res = {}
    tools = [(n, [b, "cp", "-q", "--cacert", cert, url, str(out)]) for n, b in bins]
    tools.append(("curl", ["curl", "-s", "--http2", "--cacert", cert, "-o", str(out), url]))
    for r in range(runs + 1):
        for name, cmd in tools:
            if out.exists(): out.unlink()
            w, c = hb.timed(cmd)
            if r: res.setdefault(name, []).append((w, c))
    for k, v in res.items():
        print(k, "wall", round(statistics.median(x[0] for x in v), 3), "cpu", round(statistics.median(x[1] for x in v), 3), [round(x[1], 2) for x in v], flush=True)
finally:
    hb.stop_all(); shutil.rmtree(base, ignore_errors=True)
