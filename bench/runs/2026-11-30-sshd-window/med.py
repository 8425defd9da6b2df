#!/usr/bin/env python3
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
labels = []
for r in rows:
    if r['label'] not in labels: labels.append(r['label'])
print(f"{'cell':28} {'n':>2} {'MB/s med':>9} {'wall med':>9} {'client CPU':>10} {'sshd CPU':>9} {'sshd faults k':>13}  raw sshd CPU")
for l in labels:
    rs = [r for r in rows if r['label'] == l]
    m = lambda k: st.median(r[k] for r in rs)
    print(f"{l:28} {len(rs):>2} {m('MBps'):>9.1f} {m('wall'):>9.2f} {m('cli'):>10.2f} {m('sshd'):>9.2f} {m('sshd_minflt_k'):>13.0f}  {[r['sshd'] for r in rs]}")
