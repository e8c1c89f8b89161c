#!/usr/bin/env bash
# Many concurrent slow SSE streams through Levee.
#
#   bench/streams.sh            # STREAMS=10000 by default
#
# A `levee mock` upstream answers every streaming chat completion after a
# fixed time-to-first-byte (latency fault, $TTFB_FAULT) with 11 SSE events
# spaced by $CHUNK_DELAY, so each stream lasts ~ TTFB + 10 x CHUNK_DELAY.
# bench/streams_client.py (Python stdlib, asyncio over raw sockets) opens
# $STREAMS streams at $OPEN_RATE per second and reads each to its end.
# For each round, in this order:
#   direct - the client against the mock itself (TTFB reference)
#   levee  - the client through `levee serve` (route and provider
#            max_in_flight raised to 100000 so nothing is shed)
# Measured: TTFB percentiles of both (added TTFB = levee minus direct, per
# percentile), Levee's own levee_added_latency_seconds over the streams, and
# Levee's resident memory while every stream is open, above its idle
# baseline, divided by the streams then open.
#
# File descriptors: Levee holds two sockets per stream (caller + upstream;
# with HTTP2=always one, plus one upstream per 100 streams),
# so 10,000 streams need ~20,020 descriptors in one process. The script
# raises `ulimit -n` as far as the hard limit allows; if the hard limit is
# too low it runs as many streams as fit and says so in the results.
#
# HTTP2 (unset: the provider key left out, i.e. `auto`, which on the mock's
# plain http is HTTP/1.1; `never`; `always`: HTTP/2 with prior knowledge,
# many streams on one upstream connection) sets the provider's `http2` key.
#
# Environment: STREAMS (10000), HTTP2, OPEN_RATE (500/s), TTFB_FAULT (200ms),
# CLIENT_CPU / SERVER_CPU (unset: no pinning; set, e.g. 0 and 1: the client
# on one CPU, the mock and Levee on the other),
# CHUNK_DELAY (3s; streams must outlast the STREAMS/OPEN_RATE ramp so that
# all are open at once), ROUNDS (2), LEVEE_BIN (skip the build), RAW_OUT.
# Progress on stderr only on a terminal; a results table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

STREAMS="${STREAMS:-10000}"
OPEN_RATE="${OPEN_RATE:-500}"
TTFB_FAULT="${TTFB_FAULT:-200ms}"
CHUNK_DELAY="${CHUNK_DELAY:-3s}"
ROUNDS="${ROUNDS:-2}"
HTTP2="${HTTP2:-}"
case "$HTTP2" in ""|auto|always|never) ;; *) printf 'streams.sh: HTTP2 must be auto, always or never (got %s)\n' "$HTTP2" >&2; exit 1;; esac
CLIENT_CPU="${CLIENT_CPU:-}"
SERVER_CPU="${SERVER_CPU:-}"
PIN_CLIENT=(); PIN_SRV=()
[ -n "$CLIENT_CPU" ] && PIN_CLIENT=(taskset -c "$CLIENT_CPU")
[ -n "$SERVER_CPU" ] && PIN_SRV=(taskset -c "$SERVER_CPU")

. bench/lib.sh
bench_output streams.sh
need python3 python3
need curl curl
[ -n "${LEVEE_BIN:-}" ] || say "building levee (release)..."
levee_bin release

# --- file descriptors -------------------------------------------------------
# Sockets per stream in Levee: caller + upstream, or with HTTP2=always the
# caller's alone (upstream connections carry up to 100 streams each).
if [ "$HTTP2" = always ]; then per=1; else per=2; fi
need=$(( per * STREAMS + STREAMS / 100 + 64 ))
ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
NOFILE="$(ulimit -n)"
FD_NOTE=""
if [ "$NOFILE" != unlimited ] && [ "$NOFILE" -lt "$need" ]; then
  capped=$(( (NOFILE - 64) * 100 / (100 * per + 1) ))
  FD_NOTE="hard fd limit $(ulimit -Hn) < the $need that $STREAMS streams need in Levee ($per socket(s) per stream); ran $capped streams"
  printf 'streams.sh: %s\n' "$FD_NOTE" >&2
  STREAMS="$capped"
fi

# --- processes ------------------------------------------------------------
# Temp dir, process list and cleanup on exit; free_port (bench/lib.sh).
bench_work
trap 'exit 130' INT TERM

MOCK_PORT="$(free_port)"

cat >"$work/faults.yaml" <<EOF
faults:
  - { latency: $TTFB_FAULT, chunk_delay: $CHUNK_DELAY }
EOF
# The caps out of the way: over HTTP/1.1 each open stream is a connection
# of its own, and `max_connections` (1,024 by default) would refuse the rest.
cat >"$work/levee.yaml" <<EOF
providers:
  mock: { api: openai, base_url: "http://127.0.0.1:$MOCK_PORT", max_in_flight: 100000, max_connections: 100000${HTTP2:+, http2: $HTTP2} }
routes:
  - targets: [mock]
    max_in_flight: 100000
    deadline: { default: 60s }
EOF

say "starting levee mock :$MOCK_PORT (latency $TTFB_FAULT, chunk_delay $CHUNK_DELAY)"
"${PIN_SRV[@]}" "$LEVEE_BIN" mock --listen "127.0.0.1:$MOCK_PORT" --faults "$work/faults.yaml" 2>"$work/mock.log" &
mock_pid=$!
pids+=($mock_pid)

up() { curl -s -o /dev/null "$1" 2>/dev/null; }
for _ in $(seq 1 200); do up "http://127.0.0.1:$MOCK_PORT/v1/models" && break; sleep 0.05; done
up "http://127.0.0.1:$MOCK_PORT/v1/models" || { cat "$work/mock.log" >&2; die "the mock did not start"; }

# A fresh Levee per round, so every round's idle baseline is a clean one
# (no pooled upstream connections or allocator high-water mark left over).
levee_pid=""
start_levee() {
  LV_PORT="$(free_port)"; ADMIN_PORT="$(free_port)"
  LEVEE_LOG=warn "${PIN_SRV[@]}" "$LEVEE_BIN" serve --config "$work/levee.yaml" --listen "127.0.0.1:$LV_PORT" \
    --admin "127.0.0.1:$ADMIN_PORT" 2>"$work/levee.log" &
  levee_pid=$!
  pids+=($levee_pid)
  for _ in $(seq 1 200); do up "http://127.0.0.1:$ADMIN_PORT/healthz" && return 0; sleep 0.05; done
  cat "$work/levee.log" >&2; die "levee did not start"
}
stop_levee() {
  kill "$levee_pid" 2>/dev/null || true
  wait "$levee_pid" 2>/dev/null || true
}

CLIENT=("${PIN_CLIENT[@]}" python3 bench/streams_client.py)
client() { # port count rate ready-file [dump-file] -> json on stdout
  local progress=()
  [ -n "$TTY" ] && progress=(--progress)
  local dur_ms
  dur_ms="$(python3 -c "
import re,sys
def ms(s):
    m=re.fullmatch(r'([0-9.]+)(ms|s)', s); v=float(m.group(1)); return v if m.group(2)=='ms' else v*1000
print(int(ms('$TTFB_FAULT') + 10*ms('$CHUNK_DELAY')))")"
  # Hard stop: ramp + one stream + 30 s of slack.
  local limit=$(( $2 / ${3%.*} + dur_ms / 1000 + 30 ))
  local cmd=(timeout $(( limit + 10 )) "${CLIENT[@]}" --port "$1" --count "$2" --rate "$3" --timeout "$limit"
    --ready-file "$4" ${5:+--dump "$5"} "${progress[@]}")
  # In the background (CLIENT_EXEC=1) the subshell becomes `timeout`, so the
  # PID the cleanup trap holds is the client's own.
  if [ "${CLIENT_EXEC:-}" = 1 ]; then exec "${cmd[@]}"; else "${cmd[@]}"; fi
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
metrics() { curl -s "http://127.0.0.1:$ADMIN_PORT/metrics"; }
hist_snapshot() { metrics | awk '/^levee_added_latency_seconds_bucket/ { match($0, /le="[^"]*"/); print substr($0, RSTART + 4, RLENGTH - 5) "\t" $NF }'; }

# One client run against PORT; the server process SERVER_PID is watched the
# same way in both the direct and the Levee runs (so the harness disturbs
# both alike): when every stream has its first byte, read its RSS and fds
# once. No periodic /proc polling (forks every few hundred ms showed up in
# the TTFB tail); the peak comes from VmHWM afterwards.
run_streams() { # port server_pid out_json -> sets open_kib open_streams nfd
  rm -f "$work/ready"
  CLIENT_EXEC=1 client "$1" "$STREAMS" "$OPEN_RATE" "$work/ready" "${3%.json}.ttfb" >"$3" &
  local cpid=$!
  pids+=($cpid)
  open_kib=""; open_streams=""; nfd=""; gauge=""
  while kill -0 "$cpid" 2>/dev/null; do
    if [ -z "$open_kib" ] && [ -s "$work/ready" ]; then
      open_kib="$(rss_kib "$2")"; open_streams="$(cat "$work/ready")"; nfd="$(fds "$2")"
      if [ "$2" = "$levee_pid" ]; then gauge="$(metrics | awk '/^levee_in_flight\{/ {s += $NF} END {print s + 0}')"; fi
      say "  all streams have their first byte: server RSS ${open_kib} KiB, ${open_streams} streams open, ${nfd} fds"
    fi
    sleep 0.5
  done
  wait "$cpid" || true
}

RAW="$work/raw.tsv"   # round target json
: >"$RAW"
MEM="$work/mem.tsv"   # round idle open streams_open in_flight_gauge fds peak after start mock_open (KiB)
: >"$MEM"

for r in $(seq 1 "$ROUNDS"); do
  say "round $r/$ROUNDS  direct: $STREAMS streams to the mock"
  run_streams "$MOCK_PORT" "$mock_pid" "$work/direct.$r.json"
  printf '%s\tdirect\t%s\n' "$r" "$(cat "$work/direct.$r.json")" >>"$RAW"
  mock_open_kib="$open_kib"
  sleep 3

  # Warm-up through Levee (lazy statics, metric families, the upstream
  # pool), then let it settle: the idle baseline per-stream memory is
  # measured above.
  start_levee
  start_rss="$(rss_kib "$levee_pid")"
  client "$LV_PORT" 50 500 "$work/warm.ready" >/dev/null
  sleep 2
  idle="$(rss_kib "$levee_pid")"
  say "round $r/$ROUNDS  levee: $STREAMS streams through levee (RSS at start ${start_rss} KiB, idle after a 50-stream warm-up ${idle} KiB)"
  hist_snapshot >"$work/h0"
  run_streams "$LV_PORT" "$levee_pid" "$work/levee.$r.json"
  peak="$(awk '/^VmHWM:/ {print $2}' "/proc/$levee_pid/status")"
  hist_snapshot >"$work/h1"
  paste "$work/h0" "$work/h1" | awk -F'\t' '{ print $1 "\t" ($4 - $2) }' >"$work/hd.$r"
  printf '%s\tlevee\t%s\n' "$r" "$(cat "$work/levee.$r.json")" >>"$RAW"
  sleep 3
  after="$(rss_kib "$levee_pid")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$idle" "${open_kib:-0}" "${open_streams:-0}" "${gauge:-0}" "${nfd:-0}" "$peak" "$after" "$start_rss" "${mock_open_kib:-0}" >>"$MEM"
  [ -n "${RAW_OUT:-}" ] && metrics >"${RAW_OUT%.tsv}.metrics.$r.txt"
  stop_levee
done

if [ -n "${RAW_OUT:-}" ]; then
  cp "$RAW" "$RAW_OUT"; cp "$MEM" "${RAW_OUT%.tsv}.mem.tsv"
  for f in "$work"/*.ttfb; do cp "$f" "${RAW_OUT%.tsv}.$(basename "$f")"; done
fi

# --- report ---------------------------------------------------------------
python3 - "$RAW" "$MEM" "$work" "$STREAMS" "$OPEN_RATE" "$TTFB_FAULT" "$CHUNK_DELAY" "$FD_NOTE" "${HTTP2:-auto}" <<'PY'
import glob, json, statistics, sys
from collections import defaultdict

sys.path.insert(0, "bench")
from benchlib import bucket_quantiles
raw, mem, work, streams, rate, ttfb_fault, chunk_delay, fd_note, http2 = sys.argv[1:10]
runs = defaultdict(dict)
for line in open(raw):
    r, t, doc = line.rstrip("\n").split("\t", 2)
    runs[int(r)][t] = json.loads(doc)
med = lambda xs: statistics.median(xs) if xs else float("nan")
keys = ["p50", "p90", "p99", "p99.9", "max"]
print(f"Levee streams benchmark: {streams} concurrent SSE streams, opened at {rate}/s; "
      f"upstream TTFB {ttfb_fault}, chunk_delay {chunk_delay}; provider http2: {http2}")
if fd_note:
    print(f"NOTE: {fd_note}")
print()
print("| round | target | first bytes | completed | errors | max open | TTFB p50 | p90 | p99 | p99.9 | max |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in sorted(runs):
    for t in ("direct", "levee"):
        d = runs[r].get(t)
        if not d:
            continue
        tt = d["ttfb_ms"]
        errs = ", ".join(f"{k} {v}" for k, v in d["errors"].items()) or "0"
        print(f"| {r} | {t} | {d['first_bytes']} | {d['completed']} | {errs} | {d['max_open']} | "
              + " | ".join(f"{tt[k]:.1f} ms" if tt[k] is not None else "-" for k in keys) + " |")
print()
print("| measure | per round | median | target |")
print("|---|---|---|---|")
for k in ("p50", "p99", "p99.9"):
    diffs = [runs[r]["levee"]["ttfb_ms"][k] - runs[r]["direct"]["ttfb_ms"][k]
             for r in sorted(runs) if "levee" in runs[r] and "direct" in runs[r]
             and runs[r]["levee"]["ttfb_ms"][k] is not None and runs[r]["direct"]["ttfb_ms"][k] is not None]
    tgt = "<= 1 ms" if k == "p99" else ""
    b = "**" if tgt else ""
    print(f"| added TTFB {k} (levee minus direct) | {', '.join(f'{x:+.2f} ms' for x in diffs)} | {b}{med(diffs):+.2f} ms{b} | {tgt} |")

hist = bucket_quantiles(f"{work}/hd.*")
if hist:
    count, q = hist
    print(f"| levee_added_latency_seconds over the streams ({int(count):,}), p50 | | {q(0.5)} | |")
    print(f"| levee_added_latency_seconds over the streams, p99 | | {q(0.99)} | |")

per = []
rows = [l.split("\t") for l in open(mem) if l.strip()]
for r, idle, open_kib, n_open, gauge, nfd, peak, after, start, mock_kib in rows:
    idle, open_kib, n_open, peak, after, start = int(idle), int(open_kib), int(n_open), int(peak), int(after), int(start)
    if n_open > 0:
        per.append((open_kib - idle) / n_open)
    print(f"| round {r}: levee RSS at start / idle after warm-up / all open / peak (VmHWM) / 3 s after | | {start/1024:.1f} / {idle/1024:.1f} / {open_kib/1024:.1f} / {peak/1024:.1f} / {after/1024:.1f} MiB | |")
    print(f"| round {r}: the mock's RSS with all streams open (direct run), for comparison | | {int(mock_kib)/1024:.1f} MiB | |")
    print(f"| round {r}: streams open at that moment / upstream in-flight gauge / levee fds | | {n_open} / {gauge} / {nfd} | |")
print(f"| RSS per in-flight stream above idle | {', '.join(f'{x:.1f} KiB' for x in per)} | **{med(per):.1f} KiB** | <= 16 KiB |")
PY
