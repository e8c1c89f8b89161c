#!/usr/bin/env bash
# Added latency of the Redis state backend vs the in-memory one.
#
#   bench/redis.sh [SECONDS] [ROUNDS]     # default 10 s per run, 3 rounds
#
# Starts one `levee mock`, one redis-server on a free port, and two gateways
# with the same config except `state:` (memory vs redis), each with a
# provider allowance (so every attempt runs the GCRA script in Redis) and
# every request carrying a fresh idempotency key (so every request claims
# and completes a key in Redis). wrk drives each gateway in turn, rounds
# interleaved (memory, redis, memory, redis…) so machine noise hits both;
# it prints the latency percentiles of each run and the medians. Loopback
# only; everything is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS="${1:-10}"
ROUNDS="${2:-3}"
CONNECTIONS="${CONNECTIONS:-4}"

source bench/lib.sh
need wrk wrk
need redis-server redis-server
bench_init

"$LEVEE_BIN" mock --listen 127.0.0.1:0 2>"$work/mock.log" &
pids+=($!)
mock=""
for _ in $(seq 1 200); do
  mock="$(sed -n 's/^levee mock listening on //p' "$work/mock.log")"; [ -n "$mock" ] && break; sleep 0.05
done
[ -n "$mock" ] || { cat "$work/mock.log" >&2; exit 1; }

rport="$(free_port)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
pids+=($!)

start_gw() { # name state-yaml
  local port admin
  port="$(free_port)"; admin="$(free_port)"
  cat >"$work/$1.yaml" <<YAML
$2
providers:
  p: { api: openai, base_url: "http://$mock", max_in_flight: 100000, rate_limit: { requests_per_minute: 100000000, burst: 1000000 } }
routes:
  - targets: [p]
    max_in_flight: 100000
YAML
  LEVEE_LOG=warn "$LEVEE_BIN" serve --config "$work/$1.yaml" --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" 2>"$work/$1.log" &
  pids+=($!)
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$admin/healthz" >/dev/null 2>&1 && break; sleep 0.05; done
  echo "$port $admin" >"$work/$1.ports"
}
start_gw memory "state: { backend: memory }"
start_gw redis "state: { backend: redis, url: \"redis://127.0.0.1:$rport\", key_prefix: bench, replicas: 1 }"
read -r mem _ <"$work/memory.ports"
read -r red red_admin <"$work/redis.ports"

cat >"$work/chat.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format("POST", "/v1/chat/completions",
    { ["Content-Type"] = "application/json", ["idempotency-key"] = string.format("k-%d-%d-%d", os.time(), math.random(1, 1e9), n) },
    '{"model":"m","messages":[{"role":"user","content":"Say hello."}]}')
end
LUA

# Warm up both (connections, Redis scripts loaded).
for p in "$mem" "$red"; do wrk -t1 -c4 -d2s -s "$work/chat.lua" "http://127.0.0.1:$p" >/dev/null; done

printf '%-8s %5s %10s %9s %9s %9s\n' backend round req/s p50 p90 p99 | tee "$work/table"
for r in $(seq 1 "$ROUNDS"); do
  for name in memory redis; do
    port="$mem"; [ "$name" = redis ] && port="$red"
    wrk -t1 -c"$CONNECTIONS" -d"${SECS}s" --latency -s "$work/chat.lua" "http://127.0.0.1:$port" >"$work/$name.$r.out"
    awk -v n="$name" -v r="$r" '
      /^Requests\/sec:/ {rps=$2}
      $1=="50%" {p50=$2} $1=="90%" {p90=$2} $1=="99%" {p99=$2}
      END {printf "%-8s %5s %10s %9s %9s %9s\n", n, r, rps, p50, p90, p99}' "$work/$name.$r.out" | tee -a "$work/table"
  done
done

# Open loop at a fixed rate (oha, if installed by bench/gateway.sh): latency at
# a load both backends can carry, where a difference is the backend's cost and
# not queueing. oha repeats one request, so this exercises the per-attempt
# allowance script (no caller idempotency key).
if command -v oha >/dev/null 2>&1; then
  RATE="${RATE:-2000}"
  echo
  printf '%-8s %5s %8s %9s %9s %9s   (open loop, %s req/s)\n' backend round req/s p50 p99 p99.9 "$RATE"
  echo '{"model":"m","messages":[{"role":"user","content":"Say hello."}]}' >"$work/body.json"
  for r in $(seq 1 "$ROUNDS"); do
    for name in memory redis; do
      port="$mem"; [ "$name" = redis ] && port="$red"
      oha --no-tui --output-format json -z "${SECS}s" -q "$RATE" --latency-correction -c 32 -m POST \
        -H 'content-type: application/json' -D "$work/body.json" "http://127.0.0.1:$port/v1/chat/completions" 2>/dev/null \
        | python3 -c '
import json, sys
d = json.load(sys.stdin); p = d["latencyPercentiles"]; s = d["summary"]
us = lambda v: "%.0fus" % ((v or 0) * 1e6)
print("%-8s %5s %8.0f %9s %9s %9s" % (sys.argv[1], sys.argv[2], s["requestsPerSec"], us(p["p50"]), us(p["p99"]), us(p["p99.9"])))' "$name" "$r"
    done
  done
fi

echo
fallbacks="$(curl -s "http://127.0.0.1:$red_admin/metrics" | awk '/^levee_state_fallback_total/ {s+=$NF} END {print s+0}')"
echo "Redis operations that fell back to local state during the runs: $fallbacks (0 means every request used Redis)"
echo "(latencies are end to end through the gateway to the mock; the difference between the rows is the Redis backend's cost)"
