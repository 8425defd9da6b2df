#!/bin/bash
# Run wan-full-1c: lan10's two cells below the best peer, 3 runs each, with 0789030, alone.
here=$(cd "$(dirname "$0")" && pwd)
f=$1
"$f" bench --quick --profiles lan10 --sets huge --directions download \
  --clients ferry-https,curl,aria2c --runs 3 --timeout 120 \
  --json "$here/c-lan10-down.json" > "$here/c-lan10-down.txt" 2> "$here/c-lan10-down.err"
"$f" bench --quick --profiles lan10 --sets huge --directions upload \
  --clients ferry,sftp,rclone --runs 3 --timeout 120 \
  --json "$here/c-lan10-up.json" > "$here/c-lan10-up.txt" 2> "$here/c-lan10-up.err"
