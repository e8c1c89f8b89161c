#!/usr/bin/env bash
# The blast radius of a retry, live (scenarios/shares.yaml, time scaled
# down): one provider account with an allowance of 2,000 requests/min,
# enforced by `levee mock` (429 over it), which also answers every request
# for model `draft-with-tools` with a deterministic 400 (210 ms) from FROM
# to TO seconds; other answers take 200 ms at the median, 500 ms at p99.
# Six callers, open loop (Poisson), each the official `openai` SDK at its
# defaults (2 retries, honours retry-after and x-should-retry), named by
# `x-levee-caller`: draft (the broken one, 140/min, also wrapped in its own
# 5-attempt retry loop sleeping 1, 2, 4, 8 s: up to 700/min), search 400,
# summarise 350, classify 300, translate 250, extract 150 — 2,150/min asked
# of 2,000. Two paths, interleaved, each with a fresh allowance (the fault
# document POSTed again, which also restarts the fault clock): directly to
# the mock, and through a release `levee serve` told the allowance
# (`rate_limit: { requests_per_minute: 2000 }`) with one route passing every
# model through and no `callers:` block (implicit equal shares). Per path
# and caller: calls, success %, the 429s the app saw (RateLimitError after
# the SDK's retries, and the wrapper's for draft), p50/p99 latency; the
# mock's requests and 429s; for the Levee path, Levee's outcomes per caller
# (from its request log).
#
#   bench/shares.sh [SECONDS] [FROM] [TO] [ROUNDS]      # default 100 10 90 1
#
# The mock's requests bucket holds a second's worth (`request_burst: 33`,
# as the simulator's provider does, and as the providers say they may
# enforce a per-minute limit over shorter intervals); Levee's own default
# burst is the same second's worth. With a minute's worth (a run of 100 s
# against a bucket of 2,000) the direct path never ran short and the run
# showed nothing.
#
# Environment: LEVEE_BIN (skip the build; otherwise target/release/levee is
# used when no file under crates/ or Cargo.* is newer, else it is built with
# `cargo build --release -p levee`), SEED (the arrivals, default 1). Needs
# the test venv (scripts/python-tests creates .venv), jq and curl. Loopback
# only; stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_="${1:-100}"
FROM="${2:-10}"
TO="${3:-90}"
ROUNDS="${4:-1}"
SEED="${SEED:-1}"
PY=.venv/bin/python
[ -x "$PY" ] || { echo "shares.sh: run scripts/python-tests once to create .venv" >&2; exit 1; }
source bench/lib.sh
need jq jq
bin="${CARGO_TARGET_DIR:-target}/release/levee"
if [ -z "${LEVEE_BIN:-}" ] && [ -x "$bin" ] &&
  [ -z "$(find crates Cargo.toml Cargo.lock -type f -newer "$bin" 2>/dev/null | head -1)" ]; then
  LEVEE_BIN="$bin"
fi
bench_init
echo "levee: $LEVEE_BIN ($(date -u -r "$LEVEE_BIN" +%FT%TZ)); load: $(uptime | sed 's/.*load average/load average/')" >&2

# The provider: delays first (the 400's own 210 ms before the general
# latency: the first matching delay fault wins), then the 400.
doc="$(jq -cn --arg from "${FROM}s" --arg to "${TO}s" '{
  faults: [
    {latency: "210ms", model: "draft-with-tools", from: $from, to: $to},
    {latency: {p50: "200ms", p99: "500ms"}},
    {status: 400, model: "draft-with-tools", from: $from, to: $to}
  ],
  rate_limit: {requests_per_minute: 2000, request_burst: 33}}')"
printf 'faults: []\n' >"$work/faults.yaml"
start_mock --seed 1 --faults "$work/faults.yaml"

cat >"$work/levee.yaml" <<YAML
listen: 127.0.0.1:0
admin: { listen: 127.0.0.1:0 }
providers:
  p: { api: openai, base_url: "http://$mock", rate_limit: { requests_per_minute: 2000 } }
routes:
  - targets: [p]
    expected_attempt_ms: 2000
YAML
start_serve gateway
gateway="$(jq -r .listen <<<"$serve_line")"

stats() { curl -fsS "http://$mock/_mock/stats"; }
for round in $(seq 1 "$ROUNDS"); do
  for path in direct levee; do
    url="http://$mock/v1"; [ "$path" = levee ] && url="http://$gateway/v1"
    log_before=$(wc -l <"$work/gateway.log")
    before="$(stats)"
    # A fresh allowance (a full bucket) and the fault clock at 0.
    curl -fsS -X POST --data "$doc" "http://$mock/_mock/faults" >/dev/null
    out="$("$PY" bench/shares_client.py "$url" "$SECONDS_" "$SEED")"
    after="$(stats)"
    # Levee's outcome for each request it logged, per caller.
    outcomes="$(tail -n +"$((log_before + 1))" "$work/gateway.log" |
      jq -sc '[.[] | (.fields // .) | select(.outcome != null)]
              | group_by(.caller) | map({key: .[0].caller,
                  value: (group_by(.outcome) | map({key: .[0].outcome, value: length}) | from_entries)})
              | from_entries')"
    while read -r row; do
      jq -c --arg path "$path" --argjson round "$round" --argjson o "$outcomes" \
        '{round: $round, path: $path} + . + (if $path == "levee" and .caller != "*"
          then {levee_outcomes: ($o[.caller] // {})} else {} end)' <<<"$row"
    done <<<"$out"
    jq -nc --arg path "$path" --argjson round "$round" --argjson b "$before" --argjson a "$after" \
      '{round: $round, path: $path, upstream_requests: ($a.requests_total - $b.requests_total),
        upstream_429s: (($a.rate_limited // 0) - ($b.rate_limited // 0)),
        upstream_400s: ((($a.by_status["400"]) // 0) - (($b.by_status["400"]) // 0)),
        upstream_200s: ((($a.by_status["200"]) // 0) - (($b.by_status["200"]) // 0))}'
  done
done
echo "load after: $(uptime | sed 's/.*load average/load average/')" >&2
