#!/usr/bin/env bash
# Build libferry (crates/ferry-capi) and install it under PREFIX: the
# shared and static library, include/ferry.h and lib/pkgconfig/ferry.pc.
#
# Usage: scripts/install-capi.sh PREFIX [--debug] [--no-build]
# (--no-build: install what target/ holds; scripts/test.sh builds the
# whole workspace first, so the libraries share its compiled features.)
# Then: cc app.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs ferry)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

prefix=${1:?usage: scripts/install-capi.sh PREFIX [--debug]}
profile=release
build=1
for a in "${@:2}"; do
    case "$a" in
        --debug) profile=debug ;;
        --no-build) build=0 ;;
        *) echo "install-capi.sh: unknown argument $a" >&2; exit 2 ;;
    esac
done
target="${CARGO_TARGET_DIR:-target}"

if [ "$build" = 1 ] && [ "$profile" = release ]; then
    cargo build --release -p ferry-capi
elif [ "$build" = 1 ]; then
    cargo build -p ferry-capi
fi
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/$profile/libferry.so" "$prefix/lib/libferry.so"
install -m 0644 "$target/$profile/libferry.a" "$prefix/lib/libferry.a"
install -m 0644 crates/ferry-capi/include/ferry.h "$prefix/include/ferry.h"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
sed -e "s|@PREFIX@|$(cd "$prefix" && pwd)|" -e "s|@VERSION@|$version|" \
    crates/ferry-capi/ferry.pc.in > "$prefix/lib/pkgconfig/ferry.pc"
echo "libferry $version ($profile) installed in $prefix"
