#!/usr/bin/env python3
"""Per profile, set and direction: ferry's best cell against the best peer's,
over all servers, and per server. Usage: compare.py PROFILE.json..."""
import json, sys
from collections import defaultdict

for path in sys.argv[1:]:
    d = json.load(open(path))
    groups = defaultdict(list)
    for c in d["cells"]:
        groups[(c["profile"], c["set"], c["direction"])].append(c)
    for (prof, st, di), cells in groups.items():
        ok = [c for c in cells if c["status"] == "ok" and c["mb_per_s"]]
        fer = [c for c in ok if c["ferry"] and not c["client"].startswith("ferry-base")]
        peers = [c for c in ok if not c["client"].startswith("ferry")]
        bad = [f'{c["client"]}->{c["server"]}: {c["status"]} {c.get("reason") or ""}'[:90]
               for c in cells if c["status"] != "ok"]
        print(f"== {prof} {st} {di}")
        if fer and peers:
            bf = max(fer, key=lambda c: c["mb_per_s"])
            bp = max(peers, key=lambda c: c["mb_per_s"])
            print(f"  best ferry {bf['client']}->{bf['server']} {bf['mb_per_s']:.1f}  "
                  f"best peer {bp['client']}->{bp['server']} {bp['mb_per_s']:.1f}  "
                  f"ratio {bf['mb_per_s']/bp['mb_per_s']:.2f}x")
        by_server = defaultdict(lambda: ([], []))
        for c in ok:
            if c["client"].startswith("ferry-base"): continue
            by_server[(c["server"], c["protocol"])][0 if c["ferry"] else 1].append(c)
        for (srv, proto), (f, p) in sorted(by_server.items()):
            if not f or not p:
                continue
            bf = max(f, key=lambda c: c["mb_per_s"])
            bp = max(p, key=lambda c: c["mb_per_s"])
            r = bf["mb_per_s"] / bp["mb_per_s"]
            flag = "" if r >= 1 else "   <-- slower"
            print(f"  {proto:5} {srv:12} ferry {bf['mb_per_s']:7.1f}  best peer "
                  f"{bp['client']:10} {bp['mb_per_s']:7.1f}  {r:.2f}x{flag}")
        for b in bad:
            print("  not ok:", b)
