#!/usr/bin/env bash
# An application in a 30 % brownout, live: the official `openai` SDK (default
# settings: 2 retries, honours x-should-retry) sends RATE calls/s for DURATION
# seconds, open loop, to `levee mock` answering 503 to 30 % of requests at
# random (latency otherwise nil) — once directly, once through a release
# `levee serve` with its default route. Per path: success seen by the app,
# upstream requests per call (the mock's count), p50/p99 latency.
#
#   bench/brownout.sh [RATE] [SECONDS] [ROUNDS]      # default 40 20 3
#
# Environment: LEVEE_BIN (skip the release build). Needs the test venv
# (scripts/python-tests creates .venv). Loopback only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
RATE="${1:-40}"
SECONDS_="${2:-20}"
ROUNDS="${3:-3}"
PY=.venv/bin/python
[ -x "$PY" ] || { echo "brownout.sh: run scripts/python-tests once to create .venv" >&2; exit 1; }
source bench/lib.sh
bench_init

printf 'faults:\n  - { status: 503, probability: 0.3 }\n' >"$work/faults.yaml"
start_mock --seed 1 --faults "$work/faults.yaml"
gateway_yaml p
start_serve gateway
gateway="$(jq -r .listen <<<"$serve_line")"

upstream() { curl -fsS "http://$mock/_mock/stats" | jq .requests_total; }
for round in $(seq 1 "$ROUNDS"); do
  for path in direct levee; do
    url="http://$mock/v1"; [ "$path" = levee ] && url="http://$gateway/v1"
    before="$(upstream)"
    out="$("$PY" bench/brownout_client.py "$url" "$RATE" "$SECONDS_")"
    after="$(upstream)"
    jq -c --arg path "$path" --argjson round "$round" --argjson up "$((after - before))" \
      '{round: $round, path: $path, success: (.successes / .calls * 1000 | round / 10),
        upstream_per_call: ($up / .calls * 100 | round / 100), p50_s, p99_s, errors}' <<<"$out"
  done
done
