#!/usr/bin/env bash
# Install the peers `ferry bench` compares against, where missing (Debian/
# Ubuntu, apt-get): OpenSSH server and clients, nginx with WebDAV, curl,
# aria2, lftp, rclone, openssl. Anything that cannot be installed is left
# out: ferry bench skips the cells of a missing peer and says so.
# (The same package list as scripts/test.sh.)
set -euo pipefail
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
want util-linux 'command -v setsid'
want nginx-light 'test -x /usr/sbin/nginx'
want libnginx-mod-http-dav-ext 'test -e /usr/lib/nginx/modules/ngx_http_dav_ext_module.so'
want curl 'command -v curl'
want aria2 'command -v aria2c'
want openssl 'command -v openssl'
want lftp 'command -v lftp'
want rclone 'command -v rclone'

if ((${#missing[@]} == 0)); then
    exit 0
fi
echo "install-peers: installing: ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "install-peers: need root or sudo to install: ${missing[*]} (ferry bench will skip them)" >&2
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-peers: no apt-get; please install: ${missing[*]} (ferry bench will skip them)" >&2
    exit 0
fi
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    echo "install-peers: some packages did not install; ferry bench skips what is missing" >&2
