#!/usr/bin/env bash
# Full check of the ferry workspace: formatting, clippy, all tests.
#
# The end-to-end tests start real peers on 127.0.0.1 (OpenSSH sshd and its
# clients, nginx, curl, aria2, lftp, rclone, vsftpd), so those are
# installed first when missing (Debian/Ubuntu, apt-get). Tests needing root
# (password user, tmpfs for disk-full) skip themselves when not root.
#
# Usage: scripts/test.sh [extra args for `cargo test --workspace`]
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# --- system packages --------------------------------------------------------
scripts/install-peers.sh --strict

# The disk this run has: a clean build of everything below takes about
# 4 GiB (3.7 GiB measured, 2026-11-27; debug builds keep line tables
# only: Cargo.toml).
df -Ph . | awk 'NR == 2' | awk '{ print "== disk: " $4 " free" }' >&2

# --- checks -----------------------------------------------------------------
echo "== cargo fmt --all -- --check" >&2
cargo fmt --all -- --check

echo "== cargo clippy --workspace --all-targets -- -D warnings" >&2
cargo clippy --workspace --all-targets -- -D warnings

# Fuzz targets: `cargo test --workspace` below replays every target's
# check on its committed seeds (fuzz/seeds/TARGET) and on the local corpus
# (fuzz/corpus/TARGET, when an earlier fuzz run left one), on stable with
# the workspace's build (crates/ferry-fuzz-checks/tests/seeds.rs). Real
# fuzzing (cargo-fuzz, nightly, a build of its own: ~8 minutes before the
# first input) runs only when asked: FERRY_FUZZ_SECONDS=N fuzzes each
# target N s after the tests (scripts/fuzz.sh; FERRY_FUZZ_TARGETS="a b"
# only those). docs/internals/reliability.md has the targets and figures.
fuzz_seconds=${FERRY_FUZZ_SECONDS:-0}

# ferry's russh (vendor/russh, outside the workspace) carries a cipher of
# ferry's own (aegis-128l@ferry); its unit tests check it against the
# AEGIS draft's test vector and refuse tampered packets. It also carries
# zstd compression (zstd@ferry.invalid): round trips, bombs, truncated
# frames, reset at rekey, and the `auto` level controller.
echo "== vendor/russh: cargo test --lib cipher:: compression::" >&2
(cd vendor/russh && CARGO_TARGET_DIR="$PWD/../../target/vendor-russh" \
    cargo test --lib --no-default-features --features ring,rsa,zstd -- cipher:: compression::)

echo "== cargo test --workspace --no-fail-fast $*" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# One closing line for the whole workspace (cargo's last line is often a
# crate's doc tests, with 0 tests in it).
passed=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i+1) ~ /^passed/) s += $i } END { print s + 0 }' "$log")
failed=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i+1) ~ /^failed/) s += $i } END { print s + 0 }' "$log")
echo
echo "workspace: ${passed:-0} passed, ${failed:-0} failed"

# --- C library (crates/ferry-capi) -----------------------------------------
# include/ferry.h must be what cbindgen makes of src/lib.rs now (cbindgen
# comes from crates.io when missing); then libferry is installed into a
# prefix under the target directory and examples/c/seedsets.c is built
# against it through pkg-config, shared and static, and
# examples/c/credentials.c (the credentials callback). The Python suite
# below runs them against its sshd (bindings/python/tests/test_capi.py).
# FERRY_CAPI=0 skips it.
if [ "$rc" -eq 0 ] && [ "${FERRY_CAPI:-1}" != 0 ]; then
    echo "== crates/ferry-capi: ferry.h up to date, seedsets.c builds" >&2
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
    if ! command -v cbindgen >/dev/null 2>&1; then
        echo "== cargo install cbindgen" >&2
        cargo install cbindgen --locked
    fi
    (cd crates/ferry-capi && cbindgen --config cbindgen.toml --quiet --output "$CARGO_TARGET_DIR/ferry.h.new")
    if ! diff -u crates/ferry-capi/include/ferry.h "$CARGO_TARGET_DIR/ferry.h.new"; then
        echo "crates/ferry-capi/include/ferry.h is stale: run (cd crates/ferry-capi && cbindgen --config cbindgen.toml --output include/ferry.h)" >&2
        rc=1
    fi
    prefix="$CARGO_TARGET_DIR/capi-prefix"
    # The whole workspace, as `cargo test --workspace` built it: one
    # feature set, so nothing is compiled again for libferry.
    cargo build --workspace
    scripts/install-capi.sh "$prefix" --debug --no-build
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    # shellcheck disable=SC2046 # pkg-config's words are meant to split
    cc -Wall -Wextra -Werror -O2 examples/c/seedsets.c $(pkg-config --cflags --libs ferry) \
        -Wl,-rpath,"$prefix/lib" -o "$CARGO_TARGET_DIR/seedsets"
    # shellcheck disable=SC2046
    cc -Wall -Wextra -Werror -O2 examples/c/seedsets.c $(pkg-config --cflags ferry) "$prefix/lib/libferry.a" \
        $(pkg-config --static --libs-only-l ferry | sed 's/-lferry//') -o "$CARGO_TARGET_DIR/seedsets-static"
    # shellcheck disable=SC2046
    cc -Wall -Wextra -Werror -O2 examples/c/credentials.c $(pkg-config --cflags --libs ferry) \
        -Wl,-rpath,"$prefix/lib" -o "$CARGO_TARGET_DIR/credentials"
    export FERRY_SEEDSETS="$CARGO_TARGET_DIR/seedsets" FERRY_SEEDSETS_STATIC="$CARGO_TARGET_DIR/seedsets-static"
    export FERRY_CREDENTIALS="$CARGO_TARGET_DIR/credentials"
fi

# --- Python bindings (bindings/python) -------------------------------------
# The `ferry` Python package (maturin + PyO3), built as a wheel in the dev
# profile and installed into a venv under the target directory, then its
# pytest suite against sshd, ferry serve and nginx on 127.0.0.1. The crate
# is a workspace of its own (docs/internals/bindings.md says why), so its
# dependencies get their own feature set and much of the engine compiles
# again (~4 min on 2 busy cores; the C and Python sections together took
# 12 min here, 6.5 of them in `cargo build --workspace`, which in CI
# mostly reuses what `cargo test --workspace` built).
# Its clippy run is left to the developer (cargo clippy --all-targets in
# bindings/python) for the same reason. pytest's exit code 5 (no test
# ran) fails the run. FERRY_PYTHON=0 skips it.
if [ "$rc" -eq 0 ] && [ "${FERRY_PYTHON:-1}" != 0 ]; then
    echo "== bindings/python: maturin build + pytest" >&2
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
    venv="$CARGO_TARGET_DIR/py-venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade 'maturin>=1.5,<2' pytest fsspec
    (cd bindings/python && cargo fmt -- --check)
    # ferry serve, for the tests' server: built above (cargo build --workspace).
    [ -x "$CARGO_TARGET_DIR/debug/ferry" ] || cargo build --workspace
    rm -rf "$CARGO_TARGET_DIR/wheels-dev"
    (cd bindings/python && "$venv/bin/maturin" build --profile dev --out "$CARGO_TARGET_DIR/wheels-dev")
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$CARGO_TARGET_DIR"/wheels-dev/ferry_transfer-*.whl
    set +e
    (cd bindings/python && FERRY_BIN="$CARGO_TARGET_DIR/debug/ferry" "$venv/bin/python" -m pytest tests -q -p no:cacheprovider)
    py_rc=$?
    set -e
    if [ "$py_rc" -eq 5 ]; then
        echo "bindings/python: pytest ran no test" >&2
    fi
    [ "$py_rc" -eq 0 ] || rc=1
fi

# The scorecard's smoke run, with the debug binary the tests just built (a
# release build would add ~10 minutes to CI): it must finish and verify
# every transfer; its numbers are printed, never asserted, and are not the
# ones in BENCHMARKS.md (scripts/demo.sh builds release for those).
# FERRY_BENCH=0 skips it.
if [ "$rc" -eq 0 ] && [ "${FERRY_BENCH:-1}" != 0 ]; then
    echo "== ferry bench --quick (debug build: a smoke run, not a measurement)" >&2
    target="${CARGO_TARGET_DIR:-target}"
    cargo build -p ferry
    "$target/debug/ferry" bench --quick --json "$(mktemp -d)/bench-quick.json" || rc=$?
fi

if [ "$fuzz_seconds" -gt 0 ]; then
    # shellcheck disable=SC2086 # the target list is meant to split
    scripts/fuzz.sh "$fuzz_seconds" ${FERRY_FUZZ_TARGETS:-} || rc=1
else
    echo "== fuzz: seeds and corpus replayed by cargo test; no fuzzing (FERRY_FUZZ_SECONDS=N to fuzz N s per target)" >&2
fi
exit "$rc"
