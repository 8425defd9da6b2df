#!/usr/bin/env bash
# curl -> `ferry serve` vs curl -> nginx over HTTPS on loopback, side by side.
#
# Both servers get the same files (in /dev/shm, so the disk is out of the
# picture), the same ECDSA P-256 certificate, TLS 1.3 and h2. nginx gets
# the config people use for fast static files: sendfile on, tcp_nopush,
# access log off, worker_processes auto. (With TLS, sendfile only saves
# anything with kernel TLS, which this nginx/OpenSSL does not enable by
# default; both servers encrypt in user space.)
#
# For HTTP/1.1 and HTTP/2, for each server, RUNS downloads of one file of
# SIZE with `curl -s -o /dev/null -w %{speed_download}`, servers
# interleaved within each round; prints one table (median MB/s and the
# ferry/nginx ratio) and writes the raw numbers as JSON.
#
# With PARALLEL_FILES=N (and PARALLEL_MIB, default 100) it also times N
# files of PARALLEL_MIB fetched at once by one `curl --parallel` (h1: N
# connections; h2: N streams on one connection), as the issue's
# "50 x 100 MB" case. The N names are hard links to one file, so the page
# cache holds PARALLEL_MIB, not N times that. Off by default.
#
# Usage: bench/serve-http-vs-nginx.sh [FERRY_BIN] [SIZE_MIB] [RUNS] [JSON_OUT]
#   defaults: target/release/ferry (or $CARGO_TARGET_DIR/release/ferry),
#             1024, 3, bench/runs/serve-http-vs-nginx-DATE.json
# Everything it starts is stopped by PID; its temp dir is removed.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
ferry="${1:-${CARGO_TARGET_DIR:-$repo/target}/release/ferry}"
size_mib="${2:-1024}"
runs="${3:-3}"
json_out="${4:-$repo/bench/runs/serve-http-vs-nginx-$(date -u +%Y%m%dT%H%M%SZ).json}"

for p in curl nginx openssl python3 "$ferry"; do
    command -v "$p" >/dev/null || { echo "missing: $p" >&2; exit 2; }
done

base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base=/tmp
work="$(mktemp -d "$base/ferry-vs-nginx.XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

chmod 755 "$work"
mkdir -p "$work/data" "$work/state" "$work/nginx/tmp"
echo "making a ${size_mib} MiB file in $work/data ..." >&2
head -c "$((size_mib * 1024 * 1024))" /dev/urandom >"$work/data/big.bin"
chmod 644 "$work/data/big.bin"
par_n="${PARALLEL_FILES:-0}"
par_mib="${PARALLEL_MIB:-100}"
if [ "$par_n" -gt 0 ]; then
    head -c "$((par_mib * 1024 * 1024))" /dev/urandom >"$work/data/p0.bin"
    chmod 644 "$work/data/p0.bin"
    for i in $(seq 1 $((par_n - 1))); do ln "$work/data/p0.bin" "$work/data/p$i.bin"; done
fi

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$work/key.pem" -out "$work/cert.pem" -days 2 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
chmod 644 "$work/key.pem"

token=bench-token-0123456789
fport="$(free_port)"
nport="$(free_port)"

# --- ferry serve ---
"$ferry" serve "$work/data" --no-sftp --https "127.0.0.1:$fport" \
    --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" \
    --state-dir "$work/state" --token "$token" >"$work/ferry.out" 2>"$work/ferry.err" &
pids+=($!)

# --- nginx ---
user_line=""
[ "$(id -u)" = 0 ] && user_line="user root;"
cat >"$work/nginx/nginx.conf" <<EOF
$user_line
worker_processes auto;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    client_body_temp_path $work/nginx/tmp;
    proxy_temp_path $work/nginx/tmp;
    fastcgi_temp_path $work/nginx/tmp;
    uwsgi_temp_path $work/nginx/tmp;
    scgi_temp_path $work/nginx/tmp;
    types { application/octet-stream bin; }
    server {
        listen 127.0.0.1:$nport ssl http2;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_protocols TLSv1.3;
        root $work/data;
    }
}
EOF
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" 2>"$work/nginx/stderr" &
pids+=($!)

wait_up() { # port
    for _ in $(seq 1 100); do
        if curl -s -o /dev/null --cacert "$work/cert.pem" -H "Authorization: Bearer $token" \
            "https://127.0.0.1:$1/" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "server on port $1 did not come up" >&2
    cat "$work/ferry.err" "$work/nginx/stderr" "$work/nginx/error.log" >&2 2>/dev/null || true
    exit 1
}
wait_up "$fport"
wait_up "$nport"

declare -A results
for round in $(seq 1 "$runs"); do
    for ver in http1.1 http2; do
        for srv in ferry nginx; do
            port=$fport
            [ "$srv" = nginx ] && port=$nport
            speed="$(curl -s -o /dev/null --"$ver" --cacert "$work/cert.pem" \
                -H "Authorization: Bearer $token" -w '%{speed_download} %{size_download} %{http_code}' \
                "https://127.0.0.1:$port/big.bin")"
            read -r bps got code <<<"$speed"
            if [ "$code" != 200 ] || [ "$got" != "$((size_mib * 1024 * 1024))" ]; then
                echo "$srv $ver: HTTP $code, $got bytes" >&2
                exit 1
            fi
            results["$srv,$ver"]+="$bps "
            echo "round $round $ver $srv: $(python3 -c "print(f'{$bps/1e6:.0f}')") MB/s" >&2
            if [ "$par_n" -gt 0 ]; then
                args=()
                for i in $(seq 0 $((par_n - 1))); do
                    args+=(-o /dev/null "https://127.0.0.1:$port/p$i.bin")
                done
                t0="$(date +%s.%N)"
                curl -s --fail --parallel --parallel-max "$par_n" --"$ver" --cacert "$work/cert.pem" \
                    -H "Authorization: Bearer $token" "${args[@]}"
                t1="$(date +%s.%N)"
                pbps="$(python3 -c "print($par_n * $par_mib * 1048576 / ($t1 - $t0))")"
                results["par,$srv,$ver"]+="$pbps "
                echo "round $round $ver $srv: ${par_n} x ${par_mib} MiB at once: $(python3 -c "print(f'{$pbps/1e6:.0f}')") MB/s" >&2
            fi
        done
    done
done

python3 - "$json_out" "$size_mib" "$runs" "$(uname -srm)" "$(nproc)" \
    "$("$ferry" --version 2>/dev/null | head -1)" "$(nginx -v 2>&1)" "$(curl -V | head -1)" \
    "${results[ferry,http1.1]}" "${results[nginx,http1.1]}" \
    "${results[ferry,http2]}" "${results[nginx,http2]}" \
    "$par_n" "$par_mib" "${results[par,ferry,http1.1]:-}" "${results[par,nginx,http1.1]:-}" \
    "${results[par,ferry,http2]:-}" "${results[par,nginx,http2]:-}" <<'PY'
import json, statistics, sys, os, datetime
out, size, runs, kernel, cpus, fv, nv, cv = sys.argv[1:9]
raw = {
    ("ferry", "http1.1"): sys.argv[9], ("nginx", "http1.1"): sys.argv[10],
    ("ferry", "http2"): sys.argv[11], ("nginx", "http2"): sys.argv[12],
}
par_n, par_mib = int(sys.argv[13]), int(sys.argv[14])
if par_n > 0:
    raw.update({
        (f"ferry {par_n}x{par_mib}", "http1.1"): sys.argv[15], (f"nginx {par_n}x{par_mib}", "http1.1"): sys.argv[16],
        (f"ferry {par_n}x{par_mib}", "http2"): sys.argv[17], (f"nginx {par_n}x{par_mib}", "http2"): sys.argv[18],
    })
nums = {k: [float(x) for x in v.split()] for k, v in raw.items()}
med = {k: statistics.median(v) for k, v in nums.items()}
print(f"\ncurl -> server, HTTPS on loopback, median of {runs} (MB/s)")
print(f"{'case':<28}{'ferry serve':>14}{'nginx':>14}{'ferry/nginx':>14}")
cases = [("", f"1 x {size} MiB")]
if par_n > 0:
    cases.append((f" {par_n}x{par_mib}", f"{par_n} x {par_mib} MiB at once"))
for suffix, label in cases:
    for ver in ("http1.1", "http2"):
        f, n = med[("ferry" + suffix, ver)], med[("nginx" + suffix, ver)]
        print(f"{label + ' ' + ver:<28}{f/1e6:>14.0f}{n/1e6:>14.0f}{f/n:>14.2f}")
doc = {
    "what": "curl download over HTTPS, ferry serve vs nginx, loopback",
    "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": {"kernel": kernel, "cpus": int(cpus)},
    "versions": {"ferry": fv, "nginx": nv, "curl": cv},
    "size_mib": int(size), "runs": int(runs),
    "bytes_per_second": {f"{s} {v}": nums[(s, v)] for (s, v) in nums},
    "median_bytes_per_second": {f"{s} {v}": med[(s, v)] for (s, v) in med},
}
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
with open(out, "w") as fh:
    json.dump(doc, fh, indent=2)
print(f"raw numbers: {out}")
PY
