#!/usr/bin/env bash
# Cost of dialect translation per request / per stream event: CPU time
# (perf stat's task-clock) per operation, which a shared, loaded machine
# distorts far less than wall-clock timings (time spent waiting for a core is
# not counted). Compares against the
# floor: parsing the same 1.3 KB request into a serde_json::Value and writing
# it back (what the gateway's model rewrite already does per target).
# Wall-clock medians: `cargo bench -p levee-translate --bench translate`.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-200000}"
cargo build --release -q -p levee-translate --example cost
BIN=target/release/examples/cost
printf '%-14s %14s\n' case "cpu ns/op"
base_ms=0
for case in none floor parse_value parse_openai request_o2a request_a2o answer_o2a answer_a2o event_a2o event_o2a; do
  ms=$(perf stat -x, -e task-clock "$BIN" "$case" "$N" 2>&1 >/dev/null | awk -F, '/task-clock/ {print $1}')
  if [ "$case" = none ]; then base_ms=$ms; continue; fi
  awk -v c="$case" -v m="$ms" -v bm="$base_ms" -v n="$N" \
    'BEGIN { printf "%-14s %14.0f\n", c, (m - bm) * 1e6 / n }'
done
