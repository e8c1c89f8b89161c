#!/usr/bin/env bash
# Incident stories, live: what an application using the official SDKs sees
# when its provider misbehaves, calling `levee mock` directly and through
# `levee serve`. Each story runs twice under the same conditions: for each
# path a fresh `levee mock` (same fault file, same --seed 1; the fault
# document is POSTed again at the first call, so fault windows start with
# the load) and, for the Levee path, a fresh gateway (--seed 1). The client
# (bench/incidents_client.py) uses the SDKs at their default settings (600 s
# timeout, 2 retries, honours x-should-retry) unless the story says otherwise.
#
#   storm          openai SDK, 20 calls/s open loop for 30 s; the mock answers
#                  60 % of requests 429 + retry-after: 2; a route with one
#                  target. Success, upstream requests per call, p50/p99,
#                  errors and x-levee-reason of failures.
#   storm-backup   the same, the route backed by a second, clean openai mock:
#                  also the share of successes answered by the primary
#                  (x-levee-target) and the requests each mock saw.
#   stall          levee.example.yaml's anthropic route (anthropic primary,
#                  expected 20 s; openai gpt-4.1 backup, 15 s); the primary
#                  stalls (no bytes) from 5 s to 25 s; anthropic SDK,
#                  x-timeout-ms: 8000 and timeout=9, 10 calls/s for 35 s.
#                  Success by phase, backup share of calls started 15–25 s,
#                  when levee_circuit_state (admin /metrics, polled every
#                  100 ms) first read 1 for the primary, and when the first
#                  call after 25 s was answered by the primary.
#   breaker-ramp   openai mock answering 503 from 0 s to 5 s; 40 concurrent
#                  openai SDK calls at 0 s; 10 s after the window (and the
#                  calls) end, each second for 10 s: 10 sequential calls.
#                  Status codes per second, circuit_open refusals,
#                  levee_circuit_state at each second.
#   long-stream    one openai SDK streaming call; the mock spaces its 11 SSE
#                  events 18 s apart (180 s); a route without a deadline
#                  block. Completed or not, duration (bounded at 240 s).
#   short-timeout  levee.example.yaml again; anthropic SDK with timeout=10;
#                  the primary answers 529 for the first second; 20
#                  concurrent calls at 0 s. Success, reasons, each mock's
#                  requests.
#   saturated      openai mock with 200 ms latency and capacity
#                  { max_in_flight: 20, status: 503 } (~100 calls/s); openai
#                  SDK at 150 calls/s open loop for 20 s. Offered calls,
#                  upstream requests per offered call, success.
#   brownout       bench/brownout.sh's story: 30 % random 503 (--api both),
#                  40 calls/s for 20 s, the gateway's default route.
#   random-loss    openai mock answering 60 % of requests 503 at random
#                  (flat latency); openai SDK, 20 calls/s open loop for 40 s;
#                  one target, Levee's defaults (no retry block).
#   backup-overload an anthropic mock answering every request 529, a clean
#                  openai backup (gpt-4.1); anthropic SDK, 20 sequential
#                  calls. Who answered, each call's time, the primary's
#                  requests.
#   outage         openai mock answering every request 503, no backup;
#                  openai SDK, 20 calls/s open loop for 20 s. Upstream
#                  requests per call and the time to the error.
#
#   bench/incidents.sh [STORY...]            # default: every story, ~15 min
#
# Prints one JSON line per story and path on stdout; saves them in
# bench/incidents-$INCIDENTS_COLUMN.jsonl (default column `latest`; a subset
# replaces only its stories' lines) and rewrites the table between the
# markers in bench/incidents-results.md from every bench/incidents-*.jsonl,
# one pair of columns per file (before first).
#
# Environment: LEVEE_BIN (else a dev build: `cargo build -p levee`),
# INCIDENTS_COLUMN. Needs the test venv (scripts/python-tests creates
# .venv). Loopback only; stops everything it starts (per path); calls still
# running at a story's bound are cancelled and counted as `unfinished`, and
# each client process is killed after 200 s (260 s for long-stream).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "incidents.sh: run scripts/python-tests once to create .venv" >&2; exit 1; }
ALL=(storm storm-backup stall breaker-ramp long-stream short-timeout saturated brownout
     random-loss backup-overload outage)
stories=("$@")
[ ${#stories[@]} -gt 0 ] || stories=("${ALL[@]}")
for s in "${stories[@]}"; do
  [[ " ${ALL[*]} " == *" $s "* ]] || { echo "incidents.sh: unknown story '$s' (one of: ${ALL[*]})" >&2; exit 2; }
done
COLUMN="${INCIDENTS_COLUMN:-latest}"
[[ "$COLUMN" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "incidents.sh: INCIDENTS_COLUMN must be a word" >&2; exit 2; }

source bench/lib.sh
bench_init debug
export LEVEE_BENCH_KEY=bench ANTHROPIC_API_KEY=bench OPENAI_API_KEY=bench   # api_key_env targets; the mock ignores keys
# levee.example.yaml's Bedrock provider needs credentials to start; no
# request goes to it (the stories call the anthropic/ route). AWS's
# documentation example key pair, not a secret.
export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
say() { if [ -t 2 ]; then echo "incidents: $*" >&2; fi; }
results="$work/results.jsonl"
: >"$results"

# `levee mock` on a free port, logging to $work/NAME.mock.log; sets $mock.
# (lib.sh's start_mock can read the "listening on" line before the mock has
# written all of it: only whole lines are read here.)
mock_named() {
  local name="$1" log="$work/$1.mock.log" lines
  shift
  "$LEVEE_BIN" mock --listen 127.0.0.1:0 "$@" 2>"$log" &
  pids+=($!)
  mock=""
  for _ in $(seq 1 400); do
    lines="$(wc -l <"$log")"
    if [ "$lines" -gt 0 ]; then
      mock="$(head -n "$lines" "$log" | grep -m1 -oE 'listening on [0-9.]+:[0-9]+' | awk '{print $3}' || true)"
      [ -n "$mock" ] && return 0
    fi
    sleep 0.05
  done
  echo "incidents.sh: levee mock did not start:" >&2; cat "$log" >&2; exit 1
}

# Stops every process started since pid index $1.
stop_since() {
  local i
  for ((i = $1; i < ${#pids[@]}; i++)); do kill "${pids[$i]}" 2>/dev/null || true; done
  for ((i = $1; i < ${#pids[@]}; i++)); do wait "${pids[$i]}" 2>/dev/null || true; done
  pids=("${pids[@]:0:$1}")
}

# Validates $work/levee.yaml, starts the gateway; sets $gateway and $admin.
serve() {
  "$LEVEE_BIN" check --config "$work/levee.yaml" >"$work/$1.check" 2>&1 \
    || { echo "incidents.sh: levee check refused the $1 config:" >&2; cat "$work/$1.check" >&2; exit 1; }
  start_serve "$1" --seed 1
  gateway="$(jq -r .listen <<<"$serve_line")"
  admin="$(jq -r .admin <<<"$serve_line")"
}

# The config of levee.example.yaml, its providers pointed at the mocks
# $1 (anthropic) and $2 (openai), on free ports, with a 2 s shutdown grace.
example_yaml() {
  sed -e 's|^listen: .*|listen: 127.0.0.1:0|' \
      -e 's|^admin: .*|admin: { listen: 127.0.0.1:0 }|' \
      -e 's|^shutdown_grace: .*|shutdown_grace: 2s|' \
      -e "s|base_url: https://api.anthropic.com\$|base_url: \"http://$1\"|" \
      -e "s|base_url: https://api.openai.com/v1\$|base_url: \"http://$2/v1\"|" \
      levee.example.yaml >"$work/levee.yaml"
  grep -q "http://$1\"" "$work/levee.yaml" && grep -q "http://$2/v1\"" "$work/levee.yaml" \
    || { echo "incidents.sh: levee.example.yaml no longer has the base_urls this script replaces" >&2; exit 1; }
}

# A gateway config: providers primary (at $1) and, with $2, backup; one
# route over them, with the route lines in $3 (default: none).
simple_yaml() {
  {
    echo "listen: 127.0.0.1:0"
    echo "admin: { listen: 127.0.0.1:0 }"
    echo "shutdown_grace: 2s"
    echo "providers:"
    echo "  primary: { api: openai, base_url: \"http://$1\", api_key_env: LEVEE_BENCH_KEY }"
    if [ -n "$2" ]; then
      echo "  backup: { api: openai, base_url: \"http://$2\", api_key_env: LEVEE_BENCH_KEY }"
      echo "routes:"
      echo "  - targets: [primary, backup]"
    else
      echo "routes:"
      echo "  - targets: [primary]"
    fi
    if [ -n "${3:-}" ]; then echo "$3"; fi
  } >"$work/levee.yaml"
}

client() {
  local bound="$1"; shift
  local out
  if ! out="$(timeout "$bound" "$PY" bench/incidents_client.py "$@")"; then
    echo "incidents.sh: client failed or ran past ${bound}s: $*" >&2
    return 1
  fi
  echo "$out" | tee -a "$results"
}

# One story, one path. $1 story, $2 path; the story's setup is in the case.
run() {
  local story="$1" path="$2" mark=${#pids[@]} f="$work/$1.faults.yaml"
  local m1 m2="" url args=()
  say "$story / $path"
  case "$story" in
    storm|storm-backup)
      printf 'faults:\n  - { status: 429, retry_after: 2, probability: 0.6 }\n' >"$f"
      mock_named "$story-$path-primary" --api openai --seed 1 --faults "$f"; m1="$mock"
      args=(--mock "primary=http://$m1")
      if [ "$story" = storm-backup ]; then
        mock_named "$story-$path-backup" --api openai --seed 1; m2="$mock"
        args+=(--mock "backup=http://$m2" --backup backup)
      fi
      [ "$path" = levee ] && simple_yaml "$m1" "$m2"
      url="http://$m1/v1" ;;
    stall|short-timeout)
      if [ "$story" = stall ]; then
        printf 'faults:\n  - { stall: true, from: 5s, to: 25s }\n' >"$f"
      else
        printf 'faults:\n  - { status: 529, to: 1s }\n' >"$f"
      fi
      mock_named "$story-$path-anthropic" --api anthropic --seed 1 --faults "$f"; m1="$mock"
      mock_named "$story-$path-openai" --api openai --seed 1; m2="$mock"
      args=(--sdk anthropic --mock "primary=http://$m1" --mock "backup=http://$m2"
            --primary anthropic --backup openai --model claude-bench)
      [ "$path" = levee ] && { example_yaml "$m1" "$m2"; args+=(--model anthropic/claude-bench); }
      url="http://$m1" ;;
    breaker-ramp)
      printf 'faults:\n  - { status: 503, from: 0s, to: 5s }\n' >"$f"
      mock_named "$story-$path" --api openai --seed 1 --faults "$f"; m1="$mock"
      args=(--mock "primary=http://$m1")
      [ "$path" = levee ] && simple_yaml "$m1" ""
      url="http://$m1/v1" ;;
    long-stream)
      printf 'faults:\n  - { chunk_delay: 18s }\n' >"$f"
      mock_named "$story-$path" --api openai --seed 1 --faults "$f"; m1="$mock"
      args=(--mock "primary=http://$m1")
      [ "$path" = levee ] && simple_yaml "$m1" ""
      url="http://$m1/v1" ;;
    saturated)
      printf 'faults:\n  - { latency: 200ms }\ncapacity: { max_in_flight: 20, status: 503 }\n' >"$f"
      mock_named "$story-$path" --api openai --seed 1 --faults "$f"; m1="$mock"
      args=(--mock "primary=http://$m1")
      [ "$path" = levee ] && simple_yaml "$m1" ""
      url="http://$m1/v1" ;;
    random-loss|outage)
      if [ "$story" = random-loss ]; then
        printf 'faults:\n  - { status: 503, probability: 0.6 }\n' >"$f"
      else
        printf 'faults:\n  - { status: 503 }\n' >"$f"
      fi
      mock_named "$story-$path" --api openai --seed 1 --faults "$f"; m1="$mock"
      args=(--mock "primary=http://$m1")
      [ "$path" = levee ] && simple_yaml "$m1" ""
      url="http://$m1/v1" ;;
    backup-overload)
      printf 'faults:\n  - { status: 529 }\n' >"$f"
      mock_named "$story-$path-anthropic" --api anthropic --seed 1 --faults "$f"; m1="$mock"
      mock_named "$story-$path-openai" --api openai --seed 1; m2="$mock"
      args=(--sdk anthropic --mock "primary=http://$m1" --mock "backup=http://$m2"
            --primary primary --backup backup --model claude-bench)
      if [ "$path" = levee ]; then
        {
          echo "listen: 127.0.0.1:0"
          echo "admin: { listen: 127.0.0.1:0 }"
          echo "shutdown_grace: 2s"
          echo "providers:"
          echo "  primary: { api: anthropic, base_url: \"http://$m1\", api_key_env: LEVEE_BENCH_KEY }"
          echo "  backup: { api: openai, base_url: \"http://$m2/v1\", api_key_env: LEVEE_BENCH_KEY }"
          echo "routes:"
          echo "  - targets: [primary, { provider: backup, model: gpt-4.1 }]"
        } >"$work/levee.yaml"
      fi
      url="http://$m1" ;;
    brownout)
      printf 'faults:\n  - { status: 503, probability: 0.3 }\n' >"$f"
      mock_named "$story-$path" --seed 1 --faults "$f"; m1="$mock"
      args=(--mock "primary=http://$m1")
      [ "$path" = levee ] && gateway_yaml p
      url="http://$m1/v1" ;;
  esac
  if [ "$path" = levee ]; then
    serve "$story"
    args+=(--admin "http://$admin")
    if [[ "$url" == */v1 ]]; then url="http://$gateway/v1"; else url="http://$gateway"; fi
  fi
  local bound=200
  [ "$story" = long-stream ] && bound=260
  client "$bound" "$story" --path "$path" --base-url "$url" --faults "$f" "${args[@]}" || true
  stop_since "$mark"
}

for story in "${stories[@]}"; do
  for path in direct levee; do run "$story" "$path"; done
done

# Save this run's lines under its column (replacing the same stories'
# earlier lines) and rebuild the table.
saved="bench/incidents-$COLUMN.jsonl"
version="$("$LEVEE_BIN" --version 2>/dev/null | head -1 || true), sha256 $(sha256sum "$LEVEE_BIN" | cut -c1-12)"
{
  if [ -f "$saved" ]; then
    jq -c --slurpfile new "$results" 'select(.story as $s | any($new[]; .story == $s) | not)' "$saved"
  fi
  jq -c --arg date "$(date -u +%Y-%m-%dT%H:%MZ)" --arg bin "$LEVEE_BIN" --arg version "${version:-unknown}" \
    '. + {run: {date: $date, binary: $bin, version: $version}}' "$results"
} >"$work/merged.jsonl"
mv "$work/merged.jsonl" "$saved"
files=()
[ -f bench/incidents-before.jsonl ] && files+=(bench/incidents-before.jsonl)
for g in bench/incidents-*.jsonl; do [ "$g" = bench/incidents-before.jsonl ] || files+=("$g"); done
"$PY" bench/incidents_client.py report --out bench/incidents-results.md "${files[@]}"
say "table written to bench/incidents-results.md (column $COLUMN)"
