#!/usr/bin/env bash
# Memory held by the idempotency store under large keyed answers.
#
#   bench/idempotency-memory.sh [ANSWERS]      # default 40
#
# Starts `levee mock` and `levee serve` (default idempotency settings:
# max_bytes 64 MiB, an answer over 16 MiB not stored) on free loopback ports,
# sends ANSWERS embeddings requests with distinct idempotency keys, each
# answered with ~8.7 MB (200 inputs x 4096 dimensions), and prints the
# gateway's RSS before and after, and whether the newest and the oldest key
# are still replayed. LEVEE_BIN picks the binary (default: a debug build, as
# the result is about memory held, not speed). Everything is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

ANSWERS="${1:-40}"
source bench/lib.sh
bench_init debug
MOCK=$(free_port); GW=$(free_port); ADMIN=$(free_port)

"$LEVEE_BIN" mock --listen "127.0.0.1:$MOCK" 2>"$work/mock.log" & pids+=($!)
cat >"$work/levee.yaml" <<YAML
listen: 127.0.0.1:$GW
admin: { listen: 127.0.0.1:$ADMIN }
providers:
  p: { api: openai, base_url: "http://127.0.0.1:$MOCK" }
routes:
  - targets: [p]
    deadline: { default: 60s, max: 60s }
YAML
"$LEVEE_BIN" serve --config "$work/levee.yaml" 2>"$work/gw.log" & gw=$!; pids+=($gw)
for _ in $(seq 100); do curl -sf "127.0.0.1:$ADMIN/healthz" >/dev/null && break; sleep 0.1; done
python3 -c 'import json; print(json.dumps({"model":"m","dimensions":4096,"input":["t%d"%i for i in range(200)]}))' >"$work/body.json"

rss() { awk '/VmRSS/ {printf "%.1f MiB", $2/1024}' "/proc/$gw/status"; }
post() { curl -s -D - -o /dev/null -H "idempotency-key: big-$1" -H 'content-type: application/json' --data-binary @"$work/body.json" "127.0.0.1:$GW/v1/embeddings"; }
echo "RSS before: $(rss)"
for i in $(seq "$ANSWERS"); do post "$i" >/dev/null; done
echo "RSS after $ANSWERS keyed ~8.7 MB answers: $(rss)"
post "$ANSWERS" | grep -qi '^x-levee-replayed: true' && echo "newest key: replayed" || echo "newest key: ran again"
post 1 | grep -qi '^x-levee-replayed: true' && echo "oldest key: replayed" || echo "oldest key: ran again (evicted by the byte bound)"
