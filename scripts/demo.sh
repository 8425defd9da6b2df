#!/usr/bin/env bash
# The main job, on a fresh machine: install the peers (OpenSSH, nginx, curl,
# aria2, lftp, rclone) where missing, build ferry, and run the scorecard:
# `ferry bench --quick` starts ferry serve, sshd and nginx on loopback,
# copies every data set both ways with ferry and with every peer, verifies
# every byte, prints the table and stops the servers.
#
# Usage: scripts/demo.sh [extra ferry bench flags, e.g. --sets huge,small]
# FERRY_DEMO_FULL=1 runs the full-size sets (3 runs each) instead of --quick.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-peers.sh
cargo build --release -p ferry
target="${CARGO_TARGET_DIR:-target}"
out=bench/out
mkdir -p "$out"
stamp=$(date -u +%Y%m%d-%H%M%S)
size=(--quick)
[ "${FERRY_DEMO_FULL:-0}" = 1 ] && size=()
"$target/release/ferry" bench "${size[@]}" --json "$out/bench-$stamp.json" --plot "$out/bench-$stamp.svg" "$@"
