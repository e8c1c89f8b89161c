#!/usr/bin/env bash
# Levee against HAProxy and nginx as plain reverse proxies, side by side.
#
#   bench/proxies.sh [--json]
#
# One small OpenAI chat request (bench/lib.sh's REQUEST, answered by a
# static nginx upstream with the 601-byte COMPLETION) through each target,
# on 127.0.0.1, closed loop with wrk (-t1, $CONNS connections, $SECONDS_LOAD
# s a run). Targets:
#   direct    - the upstream nginx itself (one worker)
#   haproxy   - HAProxy 2.6, one thread per CPU (bench/proxies/haproxy.cfg.in)
#   nginx     - nginx, `worker_processes auto` (bench/proxies/nginx.conf.in)
#   levee     - `levee serve` with the full policy on (deadline, retry
#               budget, breaker, admission caps, allowance, idempotency
#               key, metrics) and its default workers (one per CPU); the
#               request log off (LEVEE_LOG=warn), as the proxies' access logs.
#               The release build, profile-guided by the committed
#               pgo/levee.profdata (scripts/rustc-pgo); for the plain build
#               as levee-b: `LEVEE_PGO=0 cargo build --release --target-dir
#               target/plain`
#   levee-unbound - the same with `--cpu-affinity off`: its workers left to
#               the scheduler instead of bound to a CPU each
#   levee-b   - with LEVEE_BIN_B set: that second build of Levee, default
#               workers, in the same rounds (a build against the one before)
#   levee-pgo - with PGO=1: the build with a profile made afresh from
#               this source by scripts/build-pgo (two more release builds
#               first, ~15 min on 2 CPUs; it rewrites pgo/ in the working
#               tree); PGO_BIN names one already built
#   levee-wN  - the same with `--workers N`, for N in $WORKERS_SET: how
#               Levee's throughput scales with worker threads. On a 2-CPU
#               machine with wrk on one of them, workers past 2 share CPUs.
# Rounds are interleaved, the order rotated each round, so the machine's
# noise hits every target alike; the table gives medians of $ROUNDS rounds
# and each round's Levee / nginx and Levee / HAProxy ratios.
# user / sys us/req: CPU the target's processes (the process and its direct
# children, as nginx's workers; not wrk's) spent per request, from /proc,
# 10 ms ticks: a 10 s run of 50k req/s resolves 0.02 us.
#
# Environment: ROUNDS (3), SECONDS_LOAD (10), CONNS (16), WORKERS_SET
# ("1 2 4"), LEVEE_BIN (skip the release build), LEVEE_BIN_B, PGO (0),
# PGO_BIN. Installs nginx, HAProxy and wrk with apt-get when missing.
# Loopback only; every process it starts is stopped on exit. Progress on
# stderr only on a terminal and without --json; the table (or JSON) on
# stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-3}"
SECONDS_LOAD="${SECONDS_LOAD:-10}"
CONNS="${CONNS:-16}"
WORKERS_SET="${WORKERS_SET-1 2 4}"
. bench/lib.sh
bench_output proxies.sh "${1:-}"
need wrk wrk
need nginx nginx
need haproxy haproxy
levee_bin release
if [ "${PGO:-0}" = 1 ] && [ -z "${PGO_BIN:-}" ]; then PGO_BIN="$(scripts/build-pgo | tail -n1)"; fi
bench_work
trap 'exit 130' INT TERM

start_proxies
# target -> the process whose tree /proc is read for it
declare -A PID=([direct]="$UP_PID" [nginx]="$PX_PID" [haproxy]="$HA_PID")

proxy_yaml "$UP_PORT"
declare -A URL=(
  [direct]="http://127.0.0.1:$UP_PORT/v1/chat/completions"
  [haproxy]="http://127.0.0.1:$HA_PORT/v1/chat/completions"
  [nginx]="http://127.0.0.1:$PX_PORT/v1/chat/completions"
)
targets=(direct haproxy nginx levee)
start_levee() { # name [serve flags...]
  local name="$1" port admin; shift
  port="$(free_port)"; admin="$(free_port)"
  LEVEE_LOG=warn "$LEVEE_BIN" serve --config "$work/levee.yaml" \
    --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" "$@" 2>"$work/$name.log" &
  pids+=($!); PID[$name]=$!
  URL[$name]="http://127.0.0.1:$port/v1/chat/completions"
}
start_levee levee
start_levee levee-unbound --cpu-affinity off
targets+=(levee-unbound)
# A second build of Levee: LEVEE_BIN is that build's for this call only.
if [ -n "${LEVEE_BIN_B:-}" ]; then LEVEE_BIN="$LEVEE_BIN_B" start_levee levee-b; targets+=(levee-b); fi
if [ "${PGO:-0}" = 1 ]; then LEVEE_BIN="$PGO_BIN" start_levee levee-pgo; targets+=(levee-pgo); fi
for n in $WORKERS_SET; do
  start_levee "levee-w$n" --workers "$n"
  targets+=("levee-w$n")
done

for t in "${targets[@]}"; do
  wait_http "${URL[$t]}" || { cat "$work"/*.log "$work"/*/error.log >&2 2>/dev/null; die "$t did not come up"; }
done

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$REQUEST'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRKRESULT %d %d %d %d %d %d\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), e.status, e.connect + e.read + e.write + e.timeout))
end
LUA

HZ="$(getconf CLK_TCK)"
cpu_ticks() { # pid: "utime stime" in clock ticks, of the process (all its
  # threads) and its direct children, fields 14 and 15 of /proc/PID/stat
  local p st u=0 s=0 f
  for p in "$1" $(pgrep -P "$1" || true); do
    { read -r st <"/proc/$p/stat"; } 2>/dev/null || continue
    read -r -a f <<<"${st##*) }"  # from field 3 on: comm may hold spaces
    u=$(( u + f[11] )); s=$(( s + f[12] ))
  done
  echo "$u $s"
}

RAW="$work/raw.tsv"; : >"$RAW"
run() { # round target seconds
  local out c0 c1
  read -r -a c0 <<<"$(cpu_ticks "${PID[$2]}") $(cpu_ticks "${PID[direct]}")"
  out="$(wrk -t1 -c"$CONNS" -d"${3}s" -s "$work/post.lua" "${URL[$2]}" | awk '/^WRKRESULT/')"
  read -r -a c1 <<<"$(cpu_ticks "${PID[$2]}") $(cpu_ticks "${PID[direct]}")"
  # shellcheck disable=SC2086
  set -- "$1" "$2" $out
  awk -v r="$1" -v t="$2" -v n="$4" -v d="$5" -v a="$6" -v b="$7" -v s="$8" -v e="$9" -v hz="$HZ" \
    -v cu=$(( c1[0] - c0[0] )) -v cs=$(( c1[1] - c0[1] )) -v uu=$(( c1[2] - c0[2] )) -v us=$(( c1[3] - c0[3] )) \
    'BEGIN { k = 1e6 / hz / (n > 0 ? n : 1)  # us of CPU per tick per request
      printf "%s\t%s\t%.0f\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\n", r, t, n / (d / 1e6), a, b, s + e,
        cu * k, cs * k, uu * k, us * k }' >>"$RAW"
}

say "warming up (2 s each)..."
for t in "${targets[@]}"; do wrk -t1 -c"$CONNS" -d2s -s "$work/post.lua" "${URL[$t]}" >/dev/null; done
nt=${#targets[@]}
for r in $(seq 1 "$ROUNDS"); do
  order=("${targets[@]:$(( (r - 1) % nt ))}" "${targets[@]:0:$(( (r - 1) % nt ))}")
  for t in "${order[@]}"; do
    say "round $r/$ROUNDS  $t: ${SECONDS_LOAD}s"
    run "$r" "$t" "$SECONDS_LOAD"
    say "$(tail -n1 "$RAW" | awk -F'\t' '{ printf "    %-10s %8s req/s  p50 %6s us  p99 %6s us  user %6.2f sys %6.2f us/req  errors %s", $2, $3, $4, $5, $7, $8, $6 }')"
  done
done

python3 - "$RAW" "$ROUNDS" "$CONNS" "$(nproc)" "${JSON:-0}" "${targets[*]}" "$HZ" <<'PY'
import json, statistics, sys
from collections import defaultdict
raw, rounds, conns, ncpu, as_json, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] == "1", sys.argv[6].split()
hz = int(sys.argv[7])
by = defaultdict(dict)  # target -> round -> row
for line in open(raw):
    r, t, rps, p50, p99, errs, usr, sys_, up_usr, up_sys = line.rstrip("\n").split("\t")
    by[t][int(r)] = dict(rps=float(rps), p50=int(p50) / 1000, p99=int(p99) / 1000, errors=int(errs),
                         usr=float(usr), sys=float(sys_), up_usr=float(up_usr), up_sys=float(up_sys))
med = statistics.median
def m(t, k):
    return med(x[k] for x in by[t].values())
def ratios(a, b):
    return [by[a][r]["rps"] / by[b][r]["rps"] for r in range(1, rounds + 1) if r in by[a] and r in by[b]]
out = {"rounds": rounds, "connections": int(conns), "cpus": int(ncpu), "clk_tck": hz, "targets": {}}
for t in targets:
    out["targets"][t] = {"rps": m(t, "rps"), "p50_ms": m(t, "p50"), "p99_ms": m(t, "p99"),
                         "vs_nginx": med(ratios(t, "nginx")), "vs_haproxy": med(ratios(t, "haproxy")),
                         "user_us_per_req": m(t, "usr"), "sys_us_per_req": m(t, "sys"),
                         # the upstream nginx's, during this target's runs (for direct, the same)
                         "upstream_user_us_per_req": m(t, "up_usr"), "upstream_sys_us_per_req": m(t, "up_sys"),
                         "errors": sum(x["errors"] for x in by[t].values())}
best_p99 = min(m("nginx", "p99"), m("haproxy", "p99"))
out["levee_vs_nginx_rounds"] = ratios("levee", "nginx")
out["levee_vs_haproxy_rounds"] = ratios("levee", "haproxy")
for t in ("levee-b", "levee-pgo"):
    if t in by:
        out[f"{t}_vs_levee_rounds"] = ratios(t, "levee")
out["p99_target_ms"] = 1.5 * best_p99 + 0.3
if as_json:
    print(json.dumps(out, indent=2))
    sys.exit(0)
print(f"wrk -t1 -c{conns}, medians of {rounds} interleaved rounds, {ncpu} CPUs")
print()
print("| target | req/s | vs nginx | vs HAProxy | p50 ms | p99 ms | user us/req | sys us/req | errors |")
print("|---|---|---|---|---|---|---|---|---|")
for t in targets:
    x = out["targets"][t]
    bold = "**" if t == "levee" else ""
    print(f"| {bold}{t}{bold} | {bold}{x['rps']:,.0f}{bold} | {x['vs_nginx']:.2f} | {x['vs_haproxy']:.2f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f}"
          f" | {x['user_us_per_req']:.2f} | {x['sys_us_per_req']:.2f} | {x['errors']} |")
print()
fmt = lambda xs: ", ".join(f"{v:.2f}" for v in xs)
lv = out["targets"]["levee"]
print(f"- Levee / nginx per round: {fmt(out['levee_vs_nginx_rounds'])} (target >= 1.00)")
print(f"- Levee / HAProxy per round: {fmt(out['levee_vs_haproxy_rounds'])} (target >= 1.00)")
print(f"- Levee p99 {lv['p99_ms']:.2f} ms against 1.5 x the better proxy's ({best_p99:.2f} ms) + 0.3 ms = {out['p99_target_ms']:.2f} ms")
for t in ("levee-b", "levee-pgo"):
    if t in by:
        print(f"- {t} / nginx per round: {fmt(ratios(t, 'nginx'))}; / HAProxy: {fmt(ratios(t, 'haproxy'))}; / levee: {fmt(ratios(t, 'levee'))}")
PY
