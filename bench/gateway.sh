#!/usr/bin/env bash
# Levee gateway overhead, side by side.
#
#   bench/gateway.sh            # ROUNDS rounds of: saturation + 1k rps + 5k rps, x3 targets
#
# Non-streaming OpenAI chat completions on 127.0.0.1 against a fast fixed
# upstream (nginx answering a static chat-completion JSON to every POST),
# measured three ways in one run, rounds interleaved so machine noise hits
# all three alike:
#   direct  - the upstream nginx itself
#   nginx   - a second nginx as a plain reverse proxy (keep-alive upstream pool)
#   levee   - `levee serve` with the full policy on (deadline, retry budget,
#             breaker, admission caps, idempotency key generation, metrics)
#   levee_b - only with LEVEE_BIN_B set: a second Levee binary (e.g. the
#             commit before a change), same config, for an A/B in one run
# Load: saturation with wrk (closed loop, -t1 -c$SAT_CONNS), fixed rates with
# oha (-q RATE --latency-correction: open loop, latency counted from each
# request's scheduled send time, so a stall is not hidden by coordinated
# omission). Every load is bounded in time.
#
# MODE=default (the default): every process unpinned, the proxy nginx with
# `worker_processes auto` and Levee with its default runtime, i.e. both as
# shipped on this machine; the upstream nginx keeps one worker.
# MODE=pinned (2+ cores): the load generator runs on CPU $LOADGEN_CPU, every
# server (upstream nginx, proxy nginx, Levee) on CPU $SERVER_CPU; each nginx
# has one worker and Levee's runtime sizes itself to its one allowed CPU.
# Levee runs with LEVEE_LOG=warn: no per-request log.
#
# Noisy neighbours: the machine is shared, and a CPU-bound job of someone
# else's on the server CPU delays a woken server by up to a scheduler slice
# (2-4 ms), which swamps a 0.5 ms budget at p99. With RT=1 (default) the
# fixed-rate runs (not the saturation runs) give the servers and oha
# SCHED_FIFO priority 10 for their duration, so other tenants' jobs cannot
# preempt them; the kernel's RT throttling still leaves others 5% of each
# CPU, and at 1k-5k rps the servers use well under half a CPU. RT=0
# measures under the ordinary scheduler.
#
# Environment: MODE (default | pinned), ROUNDS (3), SAT_SECONDS (5), FIXED_SECONDS (10), RATES
# ("1000 5000"), SAT_CONNS (64), RATE_CONNS (64), LOADGEN_CPU (0),
# SERVER_CPU (1), LEVEE_BIN (skip the build), LEVEE_BIN_B (a second Levee to
# compare), LEVEE_ARGS_B (extra `serve` flags for it, e.g. "--workers 0"),
# RAW_OUT (file to keep raw rows), UPSTREAM_FIELDS (empty: the upstream's
# own five answer fields; `openai`: the 17 more an OpenAI chat completion
# carries, bench/lib.sh). RATES="" runs saturation only.
# Prints a results table on stdout; progress on stderr only on a terminal.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
SAT_SECONDS="${SAT_SECONDS:-5}"
FIXED_SECONDS="${FIXED_SECONDS:-10}"
RATES="${RATES-1000 5000}"
SAT_CONNS="${SAT_CONNS:-64}"
RATE_CONNS="${RATE_CONNS:-64}"
LOADGEN_CPU="${LOADGEN_CPU:-0}"
SERVER_CPU="${SERVER_CPU:-1}"
RT="${RT:-1}"
MODE="${MODE:-default}"
UPSTREAM_FIELDS="${UPSTREAM_FIELDS:-}"
case "$MODE" in default | pinned) ;; *) echo "gateway.sh: MODE is default or pinned" >&2; exit 1 ;; esac

. bench/lib.sh
bench_output gateway.sh

# --- tools ----------------------------------------------------------------
need nginx nginx
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
need wrk wrk
need taskset util-linux
need curl curl
export PATH="$HOME/.cargo/bin:$PATH"
if [ -n "$RATES" ] && ! command -v oha >/dev/null 2>&1; then
  # No open-loop (fixed-rate, coordinated-omission-corrected) HTTP load
  # generator is packaged in Debian 12 (no wrk2, no vegeta); oha from
  # crates.io is. Slow to build on 2 cores (several minutes), once.
  say "installing oha from crates.io (cargo install, once; takes minutes)..."
  if [ -n "$TTY" ]; then cargo install oha --locked; else cargo install -q oha --locked >/dev/null 2>&1; fi \
    || die "cargo install oha failed"
fi

[ -n "${LEVEE_BIN:-}" ] || say "building levee (release)..."
levee_bin release
[ -z "${LEVEE_BIN_B:-}" ] || [ -x "$LEVEE_BIN_B" ] || die "no levee binary at $LEVEE_BIN_B"

ncpu="$(nproc)"
if [ "$MODE" = pinned ] && [ "$ncpu" -ge 2 ]; then
  PIN_LOAD=(taskset -c "$LOADGEN_CPU"); PIN_SRV=(taskset -c "$SERVER_CPU")
else
  PIN_LOAD=(); PIN_SRV=()
fi

# --- processes ------------------------------------------------------------
# Temp dir, process list and cleanup on exit; free_port (bench/lib.sh).
bench_work
trap 'exit 130' INT TERM

UP_PORT="$(free_port)"; PX_PORT="$(free_port)"; LV_PORT="$(free_port)"; ADMIN_PORT="$(free_port)"
LB_PORT="$(free_port)"; ADMIN_B_PORT="$(free_port)"


nginx_conf() { # name workers server-block-body
  local name="$1" workers="$2" body="$3"
  mkdir -p "$work/$name/tmp"
  cat >"$work/$name/nginx.conf" <<EOF
worker_processes $workers;
daemon off;
master_process on;
pid $work/$name/nginx.pid;
error_log $work/$name/error.log warn;
events { worker_connections 8192; multi_accept on; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 75s;
  client_body_temp_path $work/$name/tmp/body;
  proxy_temp_path $work/$name/tmp/proxy;
  fastcgi_temp_path $work/$name/tmp/fastcgi;
  uwsgi_temp_path $work/$name/tmp/uwsgi;
  scgi_temp_path $work/$name/tmp/scgi;
$body
}
EOF
}
case "$UPSTREAM_FIELDS" in
  "") fields="" ;;
  openai) fields="$(provider_fields_nginx)" ;;
  *) echo "gateway.sh: UPSTREAM_FIELDS is empty or openai, not $UPSTREAM_FIELDS" >&2; exit 1 ;;
esac
nginx_conf up 1 "
  server {
    listen 127.0.0.1:$UP_PORT reuseport;
    location / {
      default_type application/json;
      $fields
      return 200 '$COMPLETION';
    }
  }"
if [ "$MODE" = pinned ]; then PX_WORKERS=1; else PX_WORKERS=auto; fi
nginx_conf px "$PX_WORKERS" "
  upstream up { server 127.0.0.1:$UP_PORT; keepalive 512; }
  server {
    listen 127.0.0.1:$PX_PORT reuseport;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection \"\";
    }
  }"
chmod -R a+rwx "$work/up/tmp" "$work/px/tmp"

proxy_yaml "$UP_PORT"


if [ "$MODE" = pinned ]; then where="servers on CPU $SERVER_CPU, load on CPU $LOADGEN_CPU"; else where="unpinned, proxy nginx workers auto"; fi
say "mode $MODE: upstream nginx :$UP_PORT, proxy nginx :$PX_PORT, levee :$LV_PORT ($where)"
"${PIN_SRV[@]}" "$NGINX" -e "$work/up/error.log" -p "$work/up" -c "$work/up/nginx.conf" &
up_pid=$!
pids+=($up_pid)
"${PIN_SRV[@]}" "$NGINX" -e "$work/px/error.log" -p "$work/px" -c "$work/px/nginx.conf" &
px_pid=$!
pids+=($px_pid)
LEVEE_LOG=warn "${PIN_SRV[@]}" "$LEVEE_BIN" serve --config "$work/levee.yaml" \
  --listen "127.0.0.1:$LV_PORT" --admin "127.0.0.1:$ADMIN_PORT" 2>"$work/levee.log" &
levee_pid=$!
pids+=($levee_pid)
targets=(direct nginx levee)
declare -A SRV_PID=([direct]="$up_pid" [nginx]="$px_pid" [levee]="$levee_pid")
declare -A URL=(
  [direct]="http://127.0.0.1:$UP_PORT/v1/chat/completions"
  [nginx]="http://127.0.0.1:$PX_PORT/v1/chat/completions"
  [levee]="http://127.0.0.1:$LV_PORT/v1/chat/completions"
)
if [ -n "${LEVEE_BIN_B:-}" ]; then
  # shellcheck disable=SC2086
  LEVEE_LOG=warn "${PIN_SRV[@]}" "$LEVEE_BIN_B" serve --config "$work/levee.yaml" \
    --listen "127.0.0.1:$LB_PORT" --admin "127.0.0.1:$ADMIN_B_PORT" ${LEVEE_ARGS_B:-} 2>"$work/levee_b.log" &
  SRV_PID[levee_b]=$!
  pids+=("${SRV_PID[levee_b]}")
  URL[levee_b]="http://127.0.0.1:$LB_PORT/v1/chat/completions"
  targets+=(levee_b)
fi
for t in "${targets[@]}"; do
  wait_http "${URL[$t]}" || { cat "$work"/up/error.log "$work"/px/error.log "$work/levee.log" >&2; die "$t did not come up"; }
done
curl -s -X POST -H 'content-type: application/json' -d "$REQUEST" "${URL[levee]}" | grep -q '"chat.completion"' \
  || die "levee did not relay the upstream's completion"
if [ -n "$UPSTREAM_FIELDS" ]; then
  for t in nginx levee; do
    curl -si -X POST -H 'content-type: application/json' -d "$REQUEST" "${URL[$t]}" | grep -qi '^x-ratelimit-remaining-tokens:' \
      || die "$t did not pass on the upstream's provider fields"
  done
fi

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
sleep 1
IDLE_RSS_START="$(rss_kib "$levee_pid")"
LEVEE_THREADS="$(awk '/^Threads:/ {print $2}' "/proc/$levee_pid/status")"
say "levee idle RSS after start: ${IDLE_RSS_START} KiB, ${LEVEE_THREADS} threads"

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$REQUEST'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRKRESULT %d %d %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    e.status, e.connect + e.read + e.write + e.timeout))
end
LUA
printf '%s' "$REQUEST" >"$work/body.json"

# CPU time (ns) used by a target's own server process and its children (an
# nginx master and worker): the proxy's cost per request, which on a noisy
# shared machine is steadier than throughput. For `direct` this is the
# upstream nginx; for `nginx` and `levee` the proxy alone (the upstream's
# CPU is the same in both and not counted).
cpu_ns() { # pid
  local p t=0
  for p in "$1" $(pgrep -P "$1" || true); do
    for f in /proc/"$p"/task/*/schedstat; do
      [ -r "$f" ] && t=$(( t + $(cut -d' ' -f1 "$f") ))
    done
  done
  echo "$t"
}

# Rows: round target load rps p50_us p90_us p99_us p999_us non2xx errors cpu_ns_per_request
RAW="$work/raw.tsv"
: >"$RAW"

saturate() { # round target seconds
  local out c0 c1
  c0="$(cpu_ns "${SRV_PID[$2]}")"
  out="$("${PIN_LOAD[@]}" wrk -t1 -c"$SAT_CONNS" -d"${3}s" -s "$work/post.lua" "${URL[$2]}" | awk '/^WRKRESULT/')"
  c1="$(cpu_ns "${SRV_PID[$2]}")"
  # shellcheck disable=SC2086
  set -- "$1" "$2" $out
  # $3=WRKRESULT $4=requests $5=duration_us $6=p50 $7=p90 $8=p99 $9=p999 $10=status_errs $11=sock_errs
  awk -v r="$1" -v t="$2" -v n="$4" -v d="$5" -v a="$6" -v q="$7" -v b="$8" -v c="$9" -v s="${10}" -v e="${11}" -v cpu="$(( c1 - c0 ))" \
    'BEGIN { printf "%s\t%s\tsat\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\n", r, t, n / (d / 1e6), a, q, b, c, s, e, cpu / n }' >>"$RAW"
}

fixed_rate() { # round target rate seconds
  local json c0 c1
  c0="$(cpu_ns "${SRV_PID[$2]}")"
  rt_servers fifo
  json="$("${RT_LOAD[@]}" "${PIN_LOAD[@]}" oha --no-tui --output-format json -z "${4}s" -q "$3" --latency-correction \
    -c "$RATE_CONNS" -m POST -H 'content-type: application/json' -D "$work/body.json" "${URL[$2]}" 2>/dev/null)" \
    || { rt_servers other; die "oha failed against $2"; }
  rt_servers other
  c1="$(cpu_ns "${SRV_PID[$2]}")"
  python3 - "$1" "$2" "$3" "$json" "$(( c1 - c0 ))" >>"$RAW" <<'PY'
import json, sys
r, t, rate, doc, cpu = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
s, p = doc["summary"], doc["latencyPercentiles"]
codes = doc.get("statusCodeDistribution", {})
non2xx = sum(v for k, v in codes.items() if not k.startswith("2"))
# oha cuts requests still in flight when -z ends; those are not errors.
errs = sum(v for k, v in doc.get("errorDistribution", {}).items() if k != "aborted due to deadline")
us = lambda v: int(round((v or 0) * 1e6))
done = sum(codes.values()) or 1
print(f"{r}\t{t}\t{rate}\t{s['requestsPerSec']:.0f}\t{us(p['p50'])}\t{us(p['p90'])}\t{us(p['p99'])}\t{us(p['p99.9'])}\t{non2xx}\t{errs}\t{cpu / done:.0f}")
PY
}

metrics() { curl -s "http://127.0.0.1:$ADMIN_PORT/metrics"; }

# Levee's own added-latency histogram over the 5k rps runs only: scrape
# before and after each, keep the bucket deltas.
HIST="$work/hist.tsv"
: >"$HIST"
hist_snapshot() { metrics | awk '/^levee_added_latency_seconds_bucket/ { match($0, /le="[^"]*"/); print substr($0, RSTART + 4, RLENGTH - 5) "\t" $NF }'; }

if [ "$RT" = 1 ] && command -v chrt >/dev/null 2>&1 && chrt -f 10 true 2>/dev/null; then
  RT_LOAD=(chrt -f 10)
else
  RT=0; RT_LOAD=()
fi
# Every server process and thread (nginx masters and workers, Levee) to
# SCHED_FIFO 10 (`rt_servers fifo`) or back to SCHED_OTHER (`rt_servers other`).
rt_servers() {
  [ "$RT" = 1 ] || return 0
  local p
  for p in "$up_pid" "$px_pid" "$levee_pid" ${SRV_PID[levee_b]:-} $(pgrep -P "$up_pid") $(pgrep -P "$px_pid"); do
    if [ "$1" = fifo ]; then chrt -a -f -p 10 "$p" >/dev/null 2>&1 || true
    else chrt -a -o -p 0 "$p" >/dev/null 2>&1 || true; fi
  done
}

say "warming up (2 s each)..."
for t in "${targets[@]}"; do
  "${PIN_LOAD[@]}" wrk -t1 -c"$SAT_CONNS" -d2s -s "$work/post.lua" "${URL[$t]}" >/dev/null
done

nt=${#targets[@]}
show_rows() { # n: print the last n raw rows on a terminal
  tail -n "$1" "$RAW" | while IFS=$'\t' read -r rr tt load rps a q b c s e cpu; do
    say "$(printf '    %-6s %-5s %7s req/s  p50 %5s us  p90 %5s us  p99 %6s us  p99.9 %6s us  non-2xx %s  errors %s  cpu %s ns/req' "$tt" "$load" "$rps" "$a" "$q" "$b" "$c" "$s" "$e" "$cpu")"
  done
}
for r in $(seq 1 "$ROUNDS"); do
  # Rotate the order each round so no target always runs first or last.
  order=("${targets[@]:$(( (r - 1) % nt ))}" "${targets[@]:0:$(( (r - 1) % nt ))}")
  # The three saturation runs back to back, so that the per-round ratios
  # compare runs a few seconds apart (neighbours' load changes slowly).
  for t in "${order[@]}"; do
    say "round $r/$ROUNDS  $t: saturation ${SAT_SECONDS}s"
    saturate "$r" "$t" "$SAT_SECONDS"
  done
  show_rows "$nt"
  for t in "${order[@]}"; do
    for rate in $RATES; do
      say "round $r/$ROUNDS  $t: $rate rps for ${FIXED_SECONDS}s"
      if [ "$t" = levee ] && [ "$rate" = 5000 ]; then hist_snapshot >"$work/h0"; fi
      fixed_rate "$r" "$t" "$rate" "$FIXED_SECONDS"
      if [ "$t" = levee ] && [ "$rate" = 5000 ]; then
        hist_snapshot >"$work/h1"
        paste "$work/h0" "$work/h1" | awk -F'\t' '{ print $1 "\t" ($4 - $2) }' >"$work/hd.$r"
      fi
    done
    show_rows "$(wc -w <<<"$RATES")"
  done
done

sleep 2
IDLE_RSS_AFTER="$(rss_kib "$levee_pid")"
metrics >"$work/metrics.txt"
[ -n "${RAW_OUT:-}" ] && cp "$RAW" "$RAW_OUT"
[ -n "${RAW_OUT:-}" ] && cp "$work/metrics.txt" "${RAW_OUT%.tsv}.metrics.txt"

# --- report ---------------------------------------------------------------
python3 - "$RAW" "$work" "$ROUNDS" "$IDLE_RSS_START" "$IDLE_RSS_AFTER" "$LEVEE_THREADS" "$([ "$RT" = 1 ] && echo on || echo off)" "$MODE" "${targets[*]}" "${UPSTREAM_FIELDS:-bare}" <<'PY'
import glob, statistics, sys
from collections import defaultdict

sys.path.insert(0, "bench")
from benchlib import bucket_quantiles
raw, work, rounds, rss0, rss1, threads, rt, mode, targets, fields = sys.argv[1:11]
targets = targets.split()
rows = [l.rstrip("\n").split("\t") for l in open(raw) if l.strip()]
by = defaultdict(list)  # (target, load) -> list of rows
for r, t, load, rps, p50, p90, p99, p999, non2xx, errs, cpu in rows:
    by[(t, load)].append(dict(round=int(r), rps=float(rps), p50=int(p50), p90=int(p90), p99=int(p99),
                              p999=int(p999), non2xx=int(non2xx), errs=int(errs), cpu=float(cpu)))
med = lambda xs: statistics.median(xs) if xs else float("nan")
loads = sorted({k[1] for k in by}, key=lambda l: (l != "sat", int(l) if l.isdigit() else 0))

print(f"Levee gateway benchmark, mode {mode}, upstream answer fields: {fields}; median of {rounds} rounds (wrk for saturation, oha open-loop for fixed rates; fixed-rate runs at SCHED_FIFO: {rt})")
print()
print(f"| target | load | req/s | p50 | p90 | p99 | p99.9 | non-2xx / errors | server CPU per request |")
print(f"|---|---|---|---|---|---|---|---|---|")
for load in loads:
    for t in targets:
        xs = by.get((t, load), [])
        if not xs:
            continue
        name = "saturation" if load == "sat" else f"{int(load):,} rps"
        f = lambda k: med([x[k] for x in xs])
        print(f"| {t} | {name} | {f('rps'):,.0f} | {f('p50')/1000:.3f} ms | {f('p90')/1000:.3f} ms | {f('p99')/1000:.3f} ms | "
              f"{f('p999')/1000:.3f} ms | {sum(x['non2xx'] for x in xs)} / {sum(x['errs'] for x in xs)} | {f('cpu')/1000:.1f} us |")

def per_round(load, key, fn):
    out = []
    for r in range(1, int(rounds) + 1):
        g = {t: next((x for x in by.get((t, load), []) if x["round"] == r), None) for t in targets}
        if all(g.values()):
            out.append(fn(g, key))
    return out

print()
sat_ratio = per_round("sat", "rps", lambda g, k: g["levee"][k] / g["nginx"][k])
sat_vs_direct = per_round("sat", "rps", lambda g, k: g["levee"][k] / g["direct"][k])
ngx_vs_direct = per_round("sat", "rps", lambda g, k: g["nginx"][k] / g["direct"][k])
print("| measure | per round | median | target |")
print("|---|---|---|---|")
fmt = lambda xs, f: ", ".join(f.format(x) for x in xs)
print(f"| levee / nginx saturation throughput | {fmt(sat_ratio, '{:.1%}')} | **{med(sat_ratio):.1%}** | >= 100% |")
if "levee_b" in targets:
    ab = per_round("sat", "rps", lambda g, k: g["levee"][k] / g["levee_b"][k])
    print(f"| levee / levee_b saturation throughput | {fmt(ab, '{:.1%}')} | **{med(ab):.1%}** | |")
    ab = per_round("sat", "cpu", lambda g, k: g["levee"][k] / g["levee_b"][k])
    print(f"| levee / levee_b CPU per request at saturation | {fmt(ab, '{:.2f}x')} | **{med(ab):.2f}x** | |")
p99_slack = per_round("sat", "p99", lambda g, k: (1.5 * g["nginx"][k] + 300 - g["levee"][k]) / 1000)
print(f"| saturation p99: nginx x 1.5 + 0.3 ms minus levee (>= 0 meets it) | {fmt(p99_slack, '{:+.3f} ms')} | **{med(p99_slack):+.3f} ms** | >= 0 |")
print(f"| levee / direct saturation throughput | {fmt(sat_vs_direct, '{:.1%}')} | {med(sat_vs_direct):.1%} | |")
print(f"| nginx / direct saturation throughput | {fmt(ngx_vs_direct, '{:.1%}')} | {med(ngx_vs_direct):.1%} | |")
# Both proxies share their CPU with the upstream, so with the CPU costs per
# request measured at saturation the expected throughput ratio is
# (nginx + upstream) / (levee + upstream), whatever the neighbours do.
est = per_round("sat", "cpu", lambda g, k: (g["nginx"][k] + g["direct"][k]) / (g["levee"][k] + g["direct"][k]))
print(f"| levee / nginx throughput from CPU per request, (nginx+upstream)/(levee+upstream) | {fmt(est, '{:.1%}')} | **{med(est):.1%}** | >= 100% |")
for load in loads:
    cpu_ratio = per_round(load, "cpu", lambda g, k: g["levee"][k] / g["nginx"][k])
    name = "saturation" if load == "sat" else f"{int(load):,} rps"
    print(f"| levee / nginx-proxy CPU per request at {name} | {fmt(cpu_ratio, '{:.2f}x')} | {med(cpu_ratio):.2f}x | |")
for load in [l for l in loads if l != "sat"]:
    for t in ("nginx", "levee"):
        for key, label in (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9")):
            d = per_round(load, key, lambda g, k, t=t: (g[t][k] - g["direct"][k]) / 1000)
            tgt = "<= 0.3 ms" if (t == "levee" and load == "5000" and key == "p99") else ""
            bold = "**" if tgt else ""
            print(f"| {t} added {label} at {int(load):,} rps (vs direct) | {fmt(d, '{:+.3f} ms')} | {bold}{med(d):+.3f} ms{bold} | {tgt} |")

# Levee's own histogram (handler time minus upstream time) over the 5k rps runs.
hist = bucket_quantiles(f"{work}/hd.*")
if hist:
    count, q = hist
    print(f"| levee_added_latency_seconds at 5,000 rps ({int(count):,} requests), p50 | | {q(0.5)} | |")
    print(f"| levee_added_latency_seconds at 5,000 rps, p99 | | **{q(0.99)}** | <= 0.3 ms |")
    print(f"| levee_added_latency_seconds at 5,000 rps, p99.9 | | {q(0.999)} | |")
print(f"| levee idle RSS after start ({threads} threads) | | **{int(rss0)/1024:.1f} MiB** | <= 30 MB |")
print(f"| levee idle RSS after the run | | {int(rss1)/1024:.1f} MiB | |")
PY
