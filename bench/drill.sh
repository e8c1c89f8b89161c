#!/usr/bin/env bash
# The two-layer-storm fault-injection exercise, live: `levee drill` at 400 rps for 90 s
# through a release gateway whose route is that incident's (retry budget 0.1 with
# 5/s, 3 attempts, breaker 0.5 / 10 s / open 5 s), in front of `levee mock`
# answering 503 with `retry-after: 2` from 20 s to 50 s.
#
#   bench/drill.sh [RATE] [DURATION]        # default 400 90s
#
# Environment: LEVEE_BIN (skip the release build and use this binary),
# TIMEOUT_MS (the callers' deadline, default 30000: the route's default),
# FAULT (the --fault flag, default the window above), OUT (default
# bench/drill: writes OUT.json and OUT.svg).
# Writes bench/drill.json (the report) and bench/drill.svg (upstream rps), and
# stops both servers whatever happens. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE="${1:-400}"
DURATION="${2:-90s}"
TIMEOUT_MS="${TIMEOUT_MS:-30000}"
FAULT="${FAULT:-status=503,retry_after=2,from=20s,to=50s}"
OUT="${OUT:-bench/drill}"   # writes $OUT.json and $OUT.svg

source bench/lib.sh
bench_init

start_mock --seed 0

gateway_yaml anthropic
cat >>"$work/levee.yaml" <<EOF
# The incident's routes block, unchanged (kept once, as a fuzz seed). Its model
# prefix picks the provider named "anthropic": here the mock, speaking the
# OpenAI dialect the drill sends.
EOF
cat fuzz/seeds/config/seed000.yaml >>"$work/levee.yaml"
start_serve gateway --seed 42
gateway="$(jq -r .listen <<<"$serve_line")"
admin="$(jq -r .admin <<<"$serve_line")"
curl -fsS "http://$admin/healthz" >/dev/null

echo "mock http://$mock, gateway http://$gateway (admin $admin); drill $RATE rps for $DURATION" >&2
set +e
"$LEVEE_BIN" drill --gateway "http://$gateway" --mock "http://$mock" \
  --rate "$RATE" --duration "$DURATION" --timeout-ms "$TIMEOUT_MS" \
  --model anthropic/claude-drill \
  --fault "$FAULT" \
  --json --plot "$OUT.svg" >"$OUT.json"
code=$?
set -e
jq . "$OUT.json"
echo "--- gateway metrics after the drill" >&2
curl -fsS "http://$admin/metrics" |
  grep -E '^levee_(requests_total|upstream_attempts_total|caller_retries_total|retry_budget_exhausted_total|rejected_total)' >&2 || true
echo "--- mock stats" >&2
curl -fsS "http://$mock/_mock/stats" | jq -c '{requests_total, by_status, max_in_flight, client_closed}' >&2
exit "$code"
