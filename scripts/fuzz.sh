#!/usr/bin/env bash
# Real fuzzing: cargo-fuzz (libFuzzer, AddressSanitizer, debug assertions)
# on the nightly toolchain, one target at a time, each for SECONDS, from
# its committed seeds (fuzz/seeds/TARGET) plus the corpus earlier runs
# left (fuzz/corpus/TARGET, not committed), which the run grows. Prints
# libFuzzer's final stats for each target and a summary line.
#
# CI does not fuzz: `cargo test --workspace` replays every seed and the
# local corpus on stable (crates/ferry-fuzz-checks/tests/seeds.rs).
# docs/internals/reliability.md lists the targets, what each asserts,
# and the figures of the last runs.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS  per target (default 60; 1800 for the issue's long runs)
#   TARGET   default: every target in fuzz/fuzz_targets
# Runs under `nice -n 19`, one fuzzer at a time: the machine is shared.
# The build goes to fuzz/target, or to $CARGO_TARGET_DIR when set (cargo-fuzz
# honours it).
#
# A crash stops that target and leaves its input in
# fuzz/artifacts/TARGET/; the other targets still run and the script
# exits 1. Replay one with
#   (cd fuzz && cargo +nightly fuzz run TARGET artifacts/TARGET/crash-...)
# or on stable with `cargo test -p ferry-fuzz-checks` once it is copied
# into fuzz/seeds/TARGET/ (do that with the fix: it is the regression
# input).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

seconds=${1:-60}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
    echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...] (SECONDS a positive number, got $seconds)" >&2
    exit 2
fi
shift || true

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "scripts/fuzz.sh: cargo-fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== cargo install cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

echo "== cargo +nightly fuzz build (AddressSanitizer; a first build took 29 min niced on 2 busy cores)" >&2
nice -n 19 cargo +nightly fuzz build

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

failed=()
for target in "${targets[@]}"; do
    if [ ! -f "fuzz_targets/$target.rs" ]; then
        echo "scripts/fuzz.sh: no target $target (see: cd fuzz && cargo +nightly fuzz list)" >&2
        exit 2
    fi
    echo "== $target: ${seconds} s from seeds/$target + corpus/$target" >&2
    mkdir -p "corpus/$target" "seeds/$target"
    if ! nice -n 19 cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1; then
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: ${#targets[@]} targets, crashed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets x ${seconds} s, no crash" >&2
