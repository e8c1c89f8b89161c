#!/usr/bin/env bash
# Clock reads and system calls per proxied request, Levee against nginx and
# HAProxy, counted by the kernel while each proxy runs at full speed.
#
#   bench/clock-reads.sh [--json] [BIN...]   # default: a release build of this checkout
#
# A read of the monotonic clock costs ~22 ns on a machine whose clock
# source is the TSC (glibc's clock_gettime through the vDSO: no system
# call, so neither strace nor callgrind sees its cost; under valgrind it
# is emulated). This counts the calls to glibc's clock_gettime with a
# uprobe (`perf probe -x libc clock_gettime`) and the system calls with
# the raw_syscalls tracepoint, over a $SECONDS_LOAD s wrk run (-t1,
# $CONNS connections) against each proxy in front of a static nginx
# upstream (the 601-byte chat completion of bench/lib.sh), and divides by
# the requests wrk counted. Each uprobe hit traps into the kernel, so the
# proxies run several times slower while counted: the counts a request
# hold, the rates do not. Levee has the full policy on (proxy_yaml) and
# its default workers; nginx `worker_processes auto`; HAProxy a thread per
# CPU (the configs of bench/proxies/).
#
# Needs root (perf probe) and perf from Debian's linux-perf. Environment:
# SECONDS_LOAD (3), CONNS (16), LEVEE_BIN. Loopback only; every process
# it starts is stopped on exit, and the probe is removed. Progress on
# stderr only on a terminal and without --json; the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_LOAD="${SECONDS_LOAD:-3}"
CONNS="${CONNS:-16}"
. bench/lib.sh
JSON_ARG=""
if [ "${1:-}" = "--json" ]; then JSON_ARG="--json"; shift; fi
bench_output clock-reads.sh "$JSON_ARG"
need wrk wrk
need nginx nginx
need haproxy haproxy
need perf linux-perf
BINS=("$@")
if [ ${#BINS[@]} -eq 0 ]; then levee_bin release; BINS=("$LEVEE_BIN"); fi
bench_work
LIBC="$(ldd "${BINS[0]}" | awk '/libc\.so/ {print $3}')"
PROBE="probe_libc:clock_gettime"
perf probe -q -x "$LIBC" clock_gettime 2>/dev/null || perf probe -l 2>/dev/null | grep -q "$PROBE" ||
  die "perf probe on $LIBC's clock_gettime failed (root and linux-perf needed)"
trap 'perf probe -q -d "$PROBE" 2>/dev/null || true; bench_cleanup' EXIT
trap 'exit 130' INT TERM

start_proxies
proxy_yaml "$UP_PORT"

declare -A URL PIDS
URL[nginx]="http://127.0.0.1:$PX_PORT/v1/chat/completions"
URL[haproxy]="http://127.0.0.1:$HA_PORT/v1/chat/completions"
targets=(nginx haproxy)
for bin in "${BINS[@]}"; do
  name="$(basename "$bin")"
  port="$(free_port)"
  LEVEE_LOG=warn "$bin" serve --config "$work/levee.yaml" --listen "127.0.0.1:$port" \
    --admin "127.0.0.1:$(free_port)" 2>"$work/$name.log" &
  pids+=($!); PIDS[$name]=$!
  URL[$name]="http://127.0.0.1:$port/v1/chat/completions"
  targets+=("$name")
done
for t in "${targets[@]}"; do wait_http "${URL[$t]}" || die "$t did not come up"; done
PIDS[nginx]="$(pgrep -P "$PX_PID" | paste -sd, -)"  # the workers
PIDS[haproxy]="$HA_PID"

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$REQUEST'
LUA
RAW="$work/raw.tsv"; : >"$RAW"
for t in "${targets[@]}"; do
  say "$t: ${SECONDS_LOAD}s counted"
  wrk -t1 -c"$CONNS" -d1s -s "$work/post.lua" "${URL[$t]}" >/dev/null
  perf stat -x, -e "raw_syscalls:sys_enter,$PROBE" -p "${PIDS[$t]}" -o "$work/$t.perf" \
    -- sleep $(( SECONDS_LOAD + 2 )) &
  ps=$!
  sleep 0.5
  n="$(wrk -t1 -c"$CONNS" -d"${SECONDS_LOAD}s" -s "$work/post.lua" "${URL[$t]}" | awk '/requests in/ {print $1}')"
  wait "$ps"
  awk -F, -v t="$t" -v n="$n" '
    $3 == "raw_syscalls:sys_enter" { s = $1 }
    $3 ~ /clock_gettime/ { c = $1 }
    END { printf "%s\t%d\t%.3f\t%.3f\n", t, n, c / n, s / n }' "$work/$t.perf" >>"$RAW"
done

python3 - "$RAW" "${JSON:-0}" <<'PY'
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
out = {t: {"requests": int(n), "clock_reads_per_request": float(c), "syscalls_per_request": float(s)}
       for t, n, c, s in rows}
if sys.argv[2] == "1":
    print(json.dumps(out, indent=2))
    sys.exit(0)
print("| proxy | requests counted | clock_gettime calls per request | system calls per request |")
print("|---|---|---|---|")
for t, x in out.items():
    print(f"| {t} | {x['requests']:,} | {x['clock_reads_per_request']:.2f} | {x['syscalls_per_request']:.2f} |")
PY
