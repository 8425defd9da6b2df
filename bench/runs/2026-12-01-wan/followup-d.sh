#!/bin/bash
# Run wan-full-1d: the two single-run cells below the best peer not yet repeated, 3 runs, with a99ab98.
here=$(cd "$(dirname "$0")" && pwd)
f=$1
"$f" bench --quick --profiles loss100 --sets small --directions upload \
  --clients ferry-https,curl-Z --runs 3 --timeout 120 \
  --json "$here/d-loss100-small-up.json" > "$here/d-loss100-small-up.txt" 2> "$here/d-loss100-small-up.err" &
sleep 15
"$f" bench --quick --scale 0.5 --profiles lossy200 --sets huge --directions upload \
  --clients ferry,scp,sftp --runs 3 --timeout 150 \
  --json "$here/d-lossy200-huge-up.json" > "$here/d-lossy200-huge-up.txt" 2> "$here/d-lossy200-huge-up.err"
wait
