#!/usr/bin/env bash
# Build libferry (crates/ferry-capi) and install it under PREFIX: the
# shared and static library, include/ferry.h and lib/pkgconfig/ferry.pc.
#
# Usage: scripts/install-capi.sh PREFIX [--debug]
# Then: cc app.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs ferry)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

prefix=${1:?usage: scripts/install-capi.sh PREFIX [--debug]}
profile=release
[ "${2:-}" = "--debug" ] && profile=debug
target="${CARGO_TARGET_DIR:-target}"

if [ "$profile" = release ]; then
    cargo build --release -p ferry-capi
else
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
