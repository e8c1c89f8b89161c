#!/usr/bin/env bash
# Where a Levee build spends its CPU at saturation: a flat `perf` profile.
#
#   bench/profile.sh BIN [BIN...]     # one profile per binary, same load
#
# For each binary: an upstream nginx (one worker, the 601-byte chat
# completion of bench/gateway.sh), `BIN serve` in front of it with the full
# policy on, wrk -t1 -c64 POSTing through Levee for $SECONDS_LOAD s, and
# `perf record -F $FREQ` (cpu-clock: this VM has no hardware counters) on
# Levee's process meanwhile. Prints per binary: CPU per request (schedstat),
# the top symbols by self time and the share per component (kernel, hyper,
# tokio, allocator, Levee's own crates, ...). Loopback only, bounded in time.
# Environment: SECONDS_LOAD (8), FREQ (1999), TOP (25), LEVEE_ARGS (extra
# `serve` flags, e.g. "--workers 0").
# Progress on stderr only on a terminal; the summaries on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_LOAD="${SECONDS_LOAD:-8}"
FREQ="${FREQ:-1999}"
TOP="${TOP:-25}"
[ $# -ge 1 ] || { echo "usage: bench/profile.sh BIN [BIN...]" >&2; exit 2; }
for t in perf wrk nginx; do command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] \
  || { echo "profile.sh: needs $t (apt-get install linux-perf wrk nginx)" >&2; exit 1; }; done
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"

# Temp dir, process list and cleanup on exit; free_port (bench/lib.sh).
. bench/lib.sh
bench_output profile.sh
bench_work
trap 'exit 130' INT TERM

UP_PORT="$(free_port)"
mkdir -p "$work/up/tmp"
cat >"$work/up/nginx.conf" <<NGX
worker_processes 1; daemon off; pid $work/up/nginx.pid; error_log $work/up/error.log warn;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; client_body_temp_path $work/up/tmp;
  server { listen 127.0.0.1:$UP_PORT; location / { default_type application/json; return 200 '$COMPLETION'; } } }
NGX
"$NGINX" -e "$work/up/error.log" -p "$work/up" -c "$work/up/nginx.conf" &
pids+=($!)
cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$REQUEST'
done = function(summary, latency, requests) io.write(string.format("WRKRESULT %d\n", summary.requests)) end
LUA
proxy_yaml "$UP_PORT"
cpu_ns() { local t=0 f; for f in /proc/"$1"/task/*/schedstat; do [ -r "$f" ] && t=$(( t + $(cut -d' ' -f1 "$f") )); done; echo "$t"; }

for bin in "$@"; do
  port="$(free_port)"; admin="$(free_port)"
  # shellcheck disable=SC2086
  LEVEE_LOG=warn "$bin" serve --config "$work/levee.yaml" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" ${LEVEE_ARGS:-} 2>"$work/levee.log" &
  lp=$!; pids+=($lp)
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$admin/healthz" && break; sleep 0.05; done
  url="http://127.0.0.1:$port/v1/chat/completions"
  wrk -t1 -c64 -d2s -s "$work/post.lua" "$url" >/dev/null
  say "profiling $bin for ${SECONDS_LOAD}s"
  c0="$(cpu_ns "$lp")"
  perf record -q -F "$FREQ" -p "$lp" -o "$work/perf.data" -- sleep "$SECONDS_LOAD" 2>/dev/null &
  perfp=$!
  n="$(wrk -t1 -c64 -d"${SECONDS_LOAD}s" -s "$work/post.lua" "$url" | awk '/^WRKRESULT/ {print $2}')"
  wait "$perfp" || true
  c1="$(cpu_ns "$lp")"
  kill "$lp"; wait "$lp" 2>/dev/null || true
  echo "## $(basename "$bin") ${LEVEE_ARGS:-}"
  echo
  echo "$n requests in ${SECONDS_LOAD} s; Levee CPU per request $(( (c1 - c0) / (n > 0 ? n : 1) )) ns (schedstat; includes perf's own overhead)"
  echo
  perf report -i "$work/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' >"$work/report.txt" || true
  echo '```'
  head -n "$TOP" "$work/report.txt"
  echo '```'
  echo
  echo "Share of samples by component:"
  echo
  python3 - "$work/report.txt" <<'PY'
import re, sys
from collections import defaultdict
share = defaultdict(float)
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
    if not m:
        continue
    pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4)
    s = sym.lower()
    if kind == "k" or dso.startswith("[kernel"):
        c = "kernel"
    elif ("mi_" in s or "malloc" in s or "free" in s or "realloc" in s or "mimalloc" in s
          or "_rjem_" in s or "je_" in s or "sdallocx" in s or "tcache" in s
          or "__rust_alloc" in s or "__rust_dealloc" in s):
        c = "allocator"
    elif "hyper_util" in s:
        c = "hyper-util"
    elif "hyper" in s or "httparse" in s:
        c = "hyper/httparse"
    elif "tokio" in s or "mio" in s:
        c = "tokio/mio"
    elif "levee" in s:
        c = "levee"
    elif "http::" in s or "header" in s:
        c = "http (header maps)"
    elif "prometheus" in s:
        c = "prometheus-client"
    elif "memcpy" in s or "memmove" in s or "memset" in s:
        c = "memcpy/memset"
    elif "bytes" in s:
        c = "bytes"
    elif "serde" in s:
        c = "serde"
    elif "libc" in dso:
        c = "libc (other)"
    else:
        c = "other user"
    share[c] += pct
for c, v in sorted(share.items(), key=lambda kv: -kv[1]):
    print(f"- {c}: {v:.1f}%")
PY
  echo
done
