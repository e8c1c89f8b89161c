#!/usr/bin/env bash
# An account at twice its allowance, live: `levee mock` enforcing a limit
# per minute (requests, or tokens) and saying what is left on every answer,
# as OpenAI does (x-ratelimit-*); the official `openai` SDK (default
# settings: 2 retries, honours retry-after and x-should-retry) sends
# 2 x the limit, open loop, once directly and once through `levee serve`
# told nothing of the limit (it learns it from the answers' fields). Per
# path: the provider's own 429s among what it was sent, what the app got,
# and how much of the allowance was used.
#
#   bench/allowance.sh [LIMIT_PER_MINUTE] [SECONDS]     # default 600 180
#
# Environment: LEVEE_BIN (skip the release build). Needs the test venv
# (scripts/python-tests creates .venv). Loopback only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT="${1:-600}"
SECONDS_="${2:-180}"
RATE=$((LIMIT * 2 / 60))
PY=.venv/bin/python
[ -x "$PY" ] || { echo "allowance.sh: run scripts/python-tests once to create .venv" >&2; exit 1; }
source bench/lib.sh
bench_init

# The brownout client's request costs the mock ~15 tokens (a token per 4
# bytes of body, no max_tokens): LIMIT x 20 tokens a minute allow about
# 1.3 x LIMIT requests, so the offered 2 x LIMIT is ~1.5 x the tokens.
for meter in requests tokens; do
  case "$meter" in
    requests) doc="{\"faults\": [], \"rate_limit\": {\"requests_per_minute\": $LIMIT}}" ;;
    tokens) doc="{\"faults\": [], \"rate_limit\": {\"tokens_per_minute\": $((LIMIT * 20))}}" ;;
  esac
  direct_accepted=0
  printf 'faults: []\n' >"$work/faults.yaml"
  start_mock --seed 1 --faults "$work/faults.yaml"
  gateway_yaml p
  start_serve "gateway-$meter"
  gateway="$(jq -r .listen <<<"$serve_line")"
  stats() { curl -fsS "http://$mock/_mock/stats"; }
  for path in direct levee; do
    # A fresh allowance (a full bucket) for each path.
    curl -fsS -X POST --data "$doc" "http://$mock/_mock/faults" >/dev/null
    url="http://$mock/v1"; [ "$path" = levee ] && url="http://$gateway/v1"
    before="$(stats)"
    out="$("$PY" bench/brownout_client.py "$url" "$RATE" "$SECONDS_")"
    after="$(stats)"
    sent=$(( $(jq .requests_total <<<"$after") - $(jq .requests_total <<<"$before") ))
    refused=$(( $(jq .rate_limited <<<"$after") - $(jq .rate_limited <<<"$before") ))
    # What the provider's allowance let through over the run (a minute's
    # worth at the start, the bucket being full, plus what refills): the
    # direct path's accepted count, which sends until refused.
    accepted=$(( sent - refused ))
    [ "$path" = direct ] && direct_accepted=$accepted
    jq -c --arg meter "$meter" --arg path "$path" --argjson sent "$sent" --argjson refused "$refused" \
      --argjson accepted "$accepted" --argjson allowed "$direct_accepted" \
      '{meter: $meter, path: $path, calls, app_success: (.successes / .calls * 1000 | round / 10),
        provider_requests: $sent, provider_429s: $refused,
        provider_429_share: ($refused / ([$sent, 1] | max) * 1000 | round / 10),
        accepted: $accepted,
        allowance_used_vs_direct: ($accepted / ([$allowed, 1] | max) * 1000 | round / 10),
        p50_s, p99_s, errors}' <<<"$out"
  done
  kill "$serve_pid" 2>/dev/null || true
done
