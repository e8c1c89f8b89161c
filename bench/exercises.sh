#!/usr/bin/env bash
# The exercises beyond the provider, live, on loopback: `levee drill` through
# release gateways in front of `levee mock`, with the gateways' Redis state
# store paused mid-run, and with one of two replicas stopped mid-run.
#
#   bench/exercises.sh [RATE] [DURATION]     # default 200 20s; events at 5 s
#
# Four drills, each with fresh gateway processes:
#   pause      --pause-state (CLIENT PAUSE 5 s): keyed requests, how many ran unshared
#   term       --failover B --stop-pid A --stop-signal term (a deploy)
#   kill       --failover B --stop-pid A --stop-signal kill (a crash)
#   term-alone --stop-pid A without --failover (what callers see without it)
#
# Environment: LEVEE_BIN (skip the release build and use this binary), OUT
# (default bench/exercises: writes OUT-<drill>.json). Needs redis-server and
# jq. Stops every process it started, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${1:-200}"
DURATION="${2:-20s}"
OUT="${OUT:-bench/exercises}"

source bench/lib.sh
bench_init

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for "$work/redis.log" 'Ready to accept connections' >/dev/null

start_mock --seed 0

gateway_yaml p "state: { backend: redis, url: \"redis://127.0.0.1:$redis_port\", key_prefix: \"bench\", replicas: 2 }"
cat >>"$work/levee.yaml" <<EOF
routes:
  - targets: [p]
EOF

# start_gateway NAME: a replica; sets NAME_url and NAME_pid.
start_gateway() {
  start_serve "$1"
  printf -v "$1_url" 'http://%s' "$(jq -r .listen <<<"$serve_line")"
  printf -v "$1_pid" '%s' "$serve_pid"
}

drill() { # NAME FLAGS...
  local name="$1"; shift
  echo "--- $name: $*" >&2
  set +e
  "$LEVEE_BIN" drill --mock "http://$mock" --rate "$RATE" --duration "$DURATION" \
    --timeout-ms 10000 --json "$@" >"$OUT-$name.json"
  set -e
  jq -c '{logical_requests, outcomes, latency_ms, unanswered, state_pause, replica_stop}' "$OUT-$name.json" >&2
}

start_gateway a
drill pause --gateway "$a_url" --pause-state "redis://127.0.0.1:$redis_port" --pause-at 5s --pause-for 5s

for variant in term kill; do
  start_gateway a; start_gateway b
  drill "$variant" --gateway "$a_url" --failover "$b_url" --stop-pid "$a_pid" --stop-at 5s --stop-signal "$variant"
done

start_gateway a
drill term-alone --gateway "$a_url" --stop-pid "$a_pid" --stop-at 5s --stop-signal term
