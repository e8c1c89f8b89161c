#!/usr/bin/env bash
# Cost of dialect translation per request / per stream event: instructions
# and CPU time (perf stat's task-clock) per operation, which a shared, loaded
# machine distorts far less than wall-clock timings. Compares against the
# floor: parsing the same 1.5 KB request into a serde_json::Value and writing
# it back (what the gateway's model rewrite already does per target).
# Wall-clock medians: `cargo bench -p levee-translate --bench translate`.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-200000}"
cargo build --release -q -p levee-translate --example cost
BIN=target/release/examples/cost
printf '%-14s %14s %14s\n' case "instr/op" "cpu ns/op"
base_instr=0; base_ms=0
for case in none floor parse_value parse_openai request_o2a request_a2o answer_o2a answer_a2o event_a2o event_o2a; do
  out=$(perf stat -x, -e instructions:u,task-clock "$BIN" "$case" "$N" 2>&1 >/dev/null)
  instr=$(echo "$out" | awk -F, '/instructions/ {print $1}')
  ms=$(echo "$out" | awk -F, '/task-clock/ {print $1}')
  if [ "$case" = none ]; then base_instr=$instr; base_ms=$ms; continue; fi
  awk -v c="$case" -v i="$instr" -v bi="$base_instr" -v m="$ms" -v bm="$base_ms" -v n="$N" \
    'BEGIN { printf "%-14s %14.0f %14.0f\n", c, (i - bi) / n, (m - bm) * 1e6 / n }'
done
