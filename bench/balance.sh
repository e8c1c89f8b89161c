#!/usr/bin/env bash
# A balanced group, live: two `levee mock --api openai` deployments of one
# model, each allowed LIMIT requests a minute and saying what is left on
# every answer (x-ratelimit-*), behind `levee serve` with one route whose
# only entry is `balance: [east, west]` (equal weights; Levee told
# nothing of the limits). The official `openai` SDK (default settings)
# sends 1.8 x one deployment's limit, open loop. Then, at a load one
# deployment can carry, west is stopped mid-run (its process killed).
# Per phase: what the app got, how the load spread, and the providers' own
# 429s among what they were sent.
#
#   bench/balance.sh [LIMIT_PER_MINUTE] [SECONDS]     # default 600 60
#
# Environment: LEVEE_BIN (skip the release build). Needs the test venv
# (scripts/python-tests creates .venv). Loopback only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-600}"
SECONDS_="${2:-60}"
RATE=$(python3 -c "print($LIMIT * 1.8 / 60)")
PY=.venv/bin/python
[ -x "$PY" ] || { echo "balance.sh: run scripts/python-tests once to create .venv" >&2; exit 1; }
source bench/lib.sh
bench_init

printf 'faults:\n  - { latency: { p50: 150ms, p99: 400ms } }\nrate_limit: { requests_per_minute: %s }\n' "$LIMIT" >"$work/faults.yaml"
start_mock --api openai --seed 1 --faults "$work/faults.yaml"
east="$mock"; east_pid="${pids[-1]}"
cp "$work/mock.log" "$work/east.log"
start_mock --api openai --seed 2 --faults "$work/faults.yaml"
west="$mock"; west_pid="${pids[-1]}"
cat >"$work/levee.yaml" <<YAML
listen: 127.0.0.1:0
admin: { listen: 127.0.0.1:0 }
providers:
  east: { api: openai, base_url: "http://$east" }
  west: { api: openai, base_url: "http://$west" }
routes:
  - targets:
      - balance: [east, west]
YAML
start_serve gateway
gateway="$(jq -r .listen <<<"$serve_line")"
stats() { curl -fsS "http://$1/_mock/stats"; }
delta() { echo $(( $(jq ".$3" <<<"$2") - $(jq ".$3" <<<"$1") )); }

# Phase 1: 1.8 x one deployment's limit, both up.
e0="$(stats "$east")"; w0="$(stats "$west")"
out="$("$PY" bench/brownout_client.py "http://$gateway/v1" "$RATE" "$SECONDS_")"
e1="$(stats "$east")"; w1="$(stats "$west")"
es=$(delta "$e0" "$e1" requests_total); ws=$(delta "$w0" "$w1" requests_total)
er=$(delta "$e0" "$e1" rate_limited); wr=$(delta "$w0" "$w1" rate_limited)
jq -c --argjson es "$es" --argjson ws "$ws" --argjson er "$er" --argjson wr "$wr" --arg rate "$RATE" \
  '{phase: "both up, 1.8x one limit", rate_per_s: ($rate | tonumber), calls,
    app_success: (.successes / .calls * 1000 | round / 10),
    east_requests: $es, west_requests: $ws,
    east_share: ($es / ([$es + $ws, 1] | max) * 1000 | round / 10),
    provider_429s: ($er + $wr),
    provider_429_share: (($er + $wr) / ([$es + $ws, 1] | max) * 1000 | round / 10),
    p50_s, p99_s, errors}' <<<"$out"

# Phase 2: KILL_LOAD (default 0.8) x one limit; west killed a third of
# the way in.
RATE2=$(python3 -c "print($LIMIT * ${KILL_LOAD:-0.8} / 60)")
e0="$(stats "$east")"; w0="$(stats "$west")"
"$PY" bench/brownout_client.py "http://$gateway/v1" "$RATE2" "$SECONDS_" >"$work/phase2.json" &
client=$!
sleep "$(python3 -c "print($SECONDS_ / 3)")"
w1="$(stats "$west")"
kill -9 "$west_pid"
wait "$client"
e1="$(stats "$east")"
admin="$(jq -r .admin <<<"$serve_line")"
# Attempts that found west gone (connection refused), from Levee's metrics.
gone=$(curl -fsS "http://$admin/metrics" | awk '/^levee_upstream_attempts_total\{/ && /provider="west"/ && /result="connect_error"/ {s += $2} END {print s + 0}')
es=$(delta "$e0" "$e1" requests_total); er=$(delta "$e0" "$e1" rate_limited)
ws=$(delta "$w0" "$w1" requests_total); wr=$(delta "$w0" "$w1" rate_limited)
jq -c --argjson es "$es" --argjson er "$er" --argjson ws "$ws" --argjson wr "$wr" --argjson gone "$gone" \
  --arg rate "$RATE2" \
  '{phase: "west killed at a third", rate_per_s: ($rate | tonumber), calls,
    app_success: (.successes / .calls * 1000 | round / 10),
    east_requests: $es, west_requests_before_kill: $ws, west_connect_errors: $gone,
    provider_429s: ($er + $wr),
    provider_429_share: (($er + $wr) / ([$es + $ws, 1] | max) * 1000 | round / 10),
    p50_s, p99_s, errors}' <"$work/phase2.json"
