#!/usr/bin/env bash
# Benchmark of `levee simulate`: one hour of traffic at 400 requests/s
# (1.44 M logical requests) for two variants (naive, levee), release build.
# Prints the wall time; the target is under 10 s on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p levee
bin=target/release/levee
scenario=bench/hour-at-400.yaml
runs=${RUNS:-3}
for i in $(seq 1 "$runs"); do
  start=$(date +%s.%N)
  "$bin" simulate "$scenario" --json > /tmp/levee-simulate-bench.json
  end=$(date +%s.%N)
  awk -v i="$i" -v s="$start" -v e="$end" 'BEGIN { printf "run %d: %.2f s\n", i, e - s }'
done
echo "result of the last run:"
"$bin" simulate "$scenario"
