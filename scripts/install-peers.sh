#!/usr/bin/env bash
# Install what ferry's tests and its scorecard talk to, where missing
# (Debian/Ubuntu, apt-get): OpenSSH server and clients, nginx with WebDAV,
# curl, aria2, lftp, rclone, vsftpd, openssl, iperf3, and the system tools
# the test harness uses; versitygw, amazon-ec2-metadata-mock and s5cmd
# (Go modules) for S3.
#
# Usage: scripts/install-peers.sh [--strict]
#   --strict (scripts/test.sh): fail when something cannot be installed.
#   default  (scripts/demo.sh): carry on; ferry bench skips missing peers.
set -euo pipefail
strict=0
[ "${1-}" = --strict ] && strict=1
missing=()
want() { # want PACKAGE TEST...  (PACKAGE is needed unless every TEST passes)
    local pkg=$1
    shift
    local t
    for t in "$@"; do
        if ! eval "$t" >/dev/null 2>&1; then
            case " ${missing[*]-} " in
            *" $pkg "*) ;;
            *) missing+=("$pkg") ;;
            esac
            return
        fi
    done
}
want openssh-server 'test -x /usr/sbin/sshd'
want openssh-sftp-server 'test -x /usr/lib/openssh/sftp-server'
want openssh-client 'command -v ssh' 'command -v sftp' 'command -v scp' 'command -v ssh-keygen'
want passwd 'command -v useradd' 'command -v chpasswd'
want mount 'command -v mount' 'command -v umount'
want procps 'test -x /usr/bin/kill || test -x /bin/kill'
want util-linux 'command -v setsid'
want libc-bin 'command -v getent'
# HTTP(S) peers: nginx (with WebDAV for PUT), curl, aria2; openssl makes
# test certificates. FTP and the bench's peer clients: vsftpd, lftp, rclone.
want nginx-light 'test -x /usr/sbin/nginx'
want libnginx-mod-http-dav-ext 'test -e /usr/lib/nginx/modules/ngx_http_dav_ext_module.so'
want curl 'command -v curl'
want aria2 'command -v aria2c'
want openssl 'command -v openssl'
want lftp 'command -v lftp'
want vsftpd 'test -x /usr/sbin/vsftpd'
want rclone 'command -v rclone'
# ferry sync's benchmark peer (bench/sync-bench.py): rsync over ssh.
want rsync 'command -v rsync'
# ProxyCommand tests (tests/sftp_proxy.rs): `ProxyCommand nc %h %p`.
want netcat-openbsd 'command -v nc'
# The packet-level link emulator (ferry-linkem net, docs/internals/wan.md):
# iproute2 for namespaces and TUN devices, iperf3 to measure its top rate.
want iproute2 'command -v ip'
want iperf3 'command -v iperf3'

# S3 peers are Go modules from the Go module proxy (docs/internals/s3.md):
# versitygw (the tests' S3 server, POSIX backend) and s5cmd (a bench
# client), installed into /usr/local/bin when missing. Needs Go (>= 1.24,
# /usr/local/go/bin/go or on PATH).
VERSITYGW_VERSION=v1.8.0
S5CMD_VERSION=v2.3.0
# amazon-ec2-metadata-mock: EC2 instance metadata on 127.0.0.1 for the
# IMDS tests (tests/s3_roles.rs), which say SKIPPED without it.
AEMM_VERSION=v1.13.0
go_install() { # go_install BINARY MODULE@VERSION
    command -v "$1" >/dev/null 2>&1 && return 0
    local go
    go=$(command -v go || echo /usr/local/go/bin/go)
    if [ ! -x "$go" ]; then
        echo "install-peers: no Go toolchain to build $1 ($2)" >&2
        return 1
    fi
    echo "install-peers: go install $2" >&2
    GOBIN=/usr/local/bin GOFLAGS=-p=2 "$go" install "$2" || {
        echo "install-peers: go install $2 failed" >&2
        return 1
    }
}
# `go install m@v` asks the proxy for m's version list (deprecation
# check), which the proxy refuses for some modules (s5cmd): those are
# built from a throwaway module that requires the version directly.
go_build() { # go_build BINARY MODULE VERSION
    command -v "$1" >/dev/null 2>&1 && return 0
    local go tmp
    go=$(command -v go || echo /usr/local/go/bin/go)
    [ -x "$go" ] || return 1
    tmp=$(mktemp -d)
    printf 'module peerbuild\n\ngo 1.24\n\nrequire %s %s\n' "$2" "$3" >"$tmp/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$2" >"$tmp/tools.go"
    echo "install-peers: go build $2@$3" >&2
    (cd "$tmp" && GOFLAGS=-mod=mod "$go" build -o "/usr/local/bin/$1" "$2") || {
        echo "install-peers: go build $2@$3 failed" >&2
        rm -rf "$tmp"
        return 1
    }
    rm -rf "$tmp"
}
go_failed=0
go_install versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" || go_failed=1
go_install ec2-metadata-mock "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@$AEMM_VERSION" || true
# s5cmd only serves the benchmark: its absence never fails the tests.
go_build s5cmd github.com/peak/s5cmd/v2 "$S5CMD_VERSION" || true
if ((go_failed && strict)); then
    echo "install-peers: versitygw is needed by the S3 tests" >&2
    exit 1
fi
# rclone >= 1.65 for `rclone serve s3`, the S3 tests' second server
# (tests/s3_peers.rs), as /usr/local/bin/rclone-s3 so that Debian's
# /usr/bin/rclone (1.60, a client of the other tests and the benchmark)
# stays what `rclone` runs. Its build is long (~1,000 Go packages: several
# minutes on 2 cores, more than CI's default run should spend), so only
# with FERRY_LONG=1 (`FERRY_LONG=1 scripts/test.sh`); without it those
# tests say SKIPPED.
RCLONE_S3_VERSION=v1.76.0
if [ "${FERRY_LONG-}" = 1 ] && ! command -v rclone-s3 >/dev/null 2>&1; then
    go=$(command -v go || echo /usr/local/go/bin/go)
    tmp=$(mktemp -d)
    echo "install-peers: go install github.com/rclone/rclone@$RCLONE_S3_VERSION (as rclone-s3)" >&2
    if GOBIN="$tmp" GOFLAGS=-p=2 "$go" install "github.com/rclone/rclone@$RCLONE_S3_VERSION" &&
        install -m 755 "$tmp/rclone" /usr/local/bin/rclone-s3; then
        :
    else
        echo "install-peers: rclone $RCLONE_S3_VERSION failed to build" >&2
        ((strict)) && exit 1
    fi
    rm -rf "$tmp"
fi

if ((${#missing[@]} == 0)); then
    exit 0
fi
give_up() {
    echo "install-peers: $1" >&2
    if ((strict)); then exit 1; fi
    echo "install-peers: carrying on; ferry bench skips what is missing" >&2
    exit 0
}
echo "install-peers: installing: ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || give_up "need root or sudo to install: ${missing[*]}"
    sudo=(sudo)
fi
command -v apt-get >/dev/null 2>&1 || give_up "no apt-get; please install: ${missing[*]}"
"${sudo[@]}" apt-get update -qq || give_up "apt-get update failed"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    give_up "apt-get install ${missing[*]} failed"
