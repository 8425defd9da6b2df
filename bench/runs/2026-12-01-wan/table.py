#!/usr/bin/env python3
"""Markdown tables of compare.py's figures: per profile, rows set/direction,
columns server; a cell is ferry MB/s / best peer MB/s (peer) ratio."""
import json, sys
from collections import defaultdict
cols = [("sftp", "ferry serve"), ("sftp", "sshd"), ("https", "ferry serve"),
        ("https", "nginx"), ("ftp", "ferry serve"), ("ftp", "vsftpd")]
short = {"lftp-pget": "pget", "lftp-pget-ftp": "pget", "aria2c": "aria2c", "curl": "curl",
         "curl-Z": "curl -Z", "rclone": "rclone", "sftp": "sftp", "scp": "scp",
         "lftp-get": "lftp", "lftp-mirror-ftp": "mirror"}
for path in sys.argv[1:]:
    d = json.load(open(path))
    g = defaultdict(list)
    for c in d["cells"]:
        if c["status"] == "ok" and c["mb_per_s"] and not c["client"].startswith("ferry-base"):
            g[(c["profile"], c["set"], c["direction"], c["protocol"], c["server"])].append(c)
    profs = sorted({k[0] for k in g})
    for prof in profs:
        print(f"\n{prof}: ferry / best peer MB/s (peer) ratio\n")
        print("| set, direction | " + " | ".join(f"{p} {s}" for p, s in cols) + " |")
        print("|---|" + "---|" * len(cols))
        for st in ["huge", "small"]:
            for di in ["download", "upload"]:
                row = []
                any_ = False
                for p, s in cols:
                    cs = g.get((prof, st, di, p, s), [])
                    f = [c for c in cs if c["ferry"]]
                    o = [c for c in cs if not c["client"].startswith("ferry")]
                    if not f:
                        row.append("-"); continue
                    any_ = True
                    bf = max(f, key=lambda c: c["mb_per_s"])
                    if not o:
                        row.append(f"{bf['mb_per_s']:.1f} / -"); continue
                    bp = max(o, key=lambda c: c["mb_per_s"])
                    r = bf["mb_per_s"] / bp["mb_per_s"]
                    mark = f"**{r:.2f}x**" if r < 1 else f"{r:.2f}x"
                    row.append(f"{bf['mb_per_s']:.1f} / {bp['mb_per_s']:.1f} {short.get(bp['client'], bp['client'])} {mark}")
                if any_:
                    print(f"| {st}, {di} | " + " | ".join(row) + " |")
