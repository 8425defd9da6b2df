#!/bin/bash
# Run wan-full-1: the scorecard on the four packet-level profiles, huge and
# small sets (--quick sizes), both directions, every peer the issue names.
# Usage: run.sh FERRY PROFILE [extra bench args...]; writes PROFILE.txt/.json here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
ferry=$1; profile=$2; shift 2
clients=ferry,sftp,scp,rclone,lftp-get,lftp-pget,ferry-https,curl,curl-Z,aria2c,ferry-ftp,lftp-pget-ftp
start=$(date -u +%FT%TZ)
"$ferry" bench --quick --profiles "$profile" --sets huge,small \
  --directions download,upload --clients "$clients" \
  --json "$here/$profile.json" "$@" > "$here/$profile.txt" 2> "$here/$profile.err"
rc=$?
echo "$profile: $start .. $(date -u +%FT%TZ) rc=$rc" >> "$here/times.txt"
