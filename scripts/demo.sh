#!/usr/bin/env bash
# The main job, on a fresh machine: build ferry, start a private OpenSSH
# server on loopback, copy the standard data sets both ways with ferry and
# with OpenSSH's sftp, verify every byte, and print the scorecard rows.
# (When `ferry serve` lands, this runs against it instead; see issue 3.)
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v sftp >/dev/null || need+=(openssh-client)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -p ferry -p ferry-linkem
work=${FERRY_DEMO_DIR:-/dev/shm/ferry-demo}
[ -d /dev/shm ] || work=/tmp/ferry-demo
python3 bench/sftp-bench.py --workdir "$work" --quick --runs 1 --sets large,medium,small "$@"
