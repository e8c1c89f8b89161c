#!/usr/bin/env bash
# Non-streaming throughput of `levee mock` on loopback, measured with wrk.
#
#   bench/mock.sh [SECONDS]        # default 10
#
# Environment: CONNECTIONS (default 64), WRK_THREADS (default 1),
# LEVEE_BIN (skip the build and use this binary).
# Installs wrk with apt-get if it is missing, builds the release binary,
# starts the mock on a free port, POSTs one chat completion per request for
# SECONDS, prints req/s and latency percentiles, and stops the mock.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_TO_RUN="${1:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
WRK_THREADS="${WRK_THREADS:-1}"

source bench/lib.sh
need wrk wrk
bench_init

# Port 0: the mock picks a free port and prints it.
"$LEVEE_BIN" mock --listen 127.0.0.1:0 2>"$work/mock.log" &
pid=$!; pids+=("$pid")
addr=""
for _ in $(seq 1 200); do
  addr="$(sed -n 's/^levee mock listening on //p' "$work/mock.log")"
  [ -n "$addr" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/mock.log" >&2; exit 1; }
  sleep 0.05
done
[ -n "$addr" ] || { echo "the mock did not start:" >&2; cat "$work/mock.log" >&2; exit 1; }

cat >"$work/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}],"max_tokens":64}'
LUA

wrk -t"$WRK_THREADS" -c"$CONNECTIONS" -d"${SECONDS_TO_RUN}s" --latency -s "$work/chat.lua" "http://$addr" | tee "$work/wrk.out"

rps="$(awk '/^Requests\/sec:/ {print $2}' "$work/wrk.out")"
p50="$(awk '$1 == "50%" {print $2}' "$work/wrk.out")"
p99="$(awk '$1 == "99%" {print $2}' "$work/wrk.out")"
non2xx="$(awk '/Non-2xx/ {print $NF}' "$work/wrk.out")"
stats="$(curl -s "http://$addr/_mock/stats" | head -c 300)"
echo
echo "mock stats: $stats..."
echo "RESULT levee mock non-streaming: ${rps} req/s, p50 ${p50}, p99 ${p99}, non-2xx ${non2xx:-0} (wrk -t${WRK_THREADS} -c${CONNECTIONS} -d${SECONDS_TO_RUN}s, $(nproc) cores)"
