#!/bin/bash
# Run wan-full-1b: the cells run wan-full-1 left in doubt, 3 runs each, with 0789030.
here=$(cd "$(dirname "$0")" && pwd)
f=$1
"$f" bench --quick --scale 0.5 --profiles lossy200 --sets huge --directions download \
  --clients ferry-https,curl,aria2c,ferry-ftp,lftp-pget-ftp --runs 3 --timeout 150 \
  --json "$here/b-lossy200-huge.json" > "$here/b-lossy200-huge.txt" 2> "$here/b-lossy200-huge.err" &
sleep 20
"$f" bench --quick --profiles wan50 --sets small --directions download,upload \
  --clients ferry-ftp,lftp-mirror-ftp,ferry-https,curl-Z --runs 3 --timeout 150 \
  --json "$here/b-wan50-small.json" > "$here/b-wan50-small.txt" 2> "$here/b-wan50-small.err"
wait
