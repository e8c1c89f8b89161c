#!/usr/bin/env bash
# User-space instructions per proxied request, Levee against nginx as a
# plain reverse proxy, counted by valgrind's callgrind.
#
#   bench/instructions.sh [BIN...]   # default: a release build of this checkout
#
# Wall-clock CPU per request on this shared 2-vCPU VM moves by 10-30 %
# between runs with the neighbours' load, and the VM exposes no hardware
# counters to `perf stat`. Callgrind counts the instructions a process
# executes, which do not depend on what else the machine is doing, so two
# builds (or Levee and nginx) compare on the same footing in any hour. What
# it does not see: the kernel (loopback TCP, epoll, wake-ups: a third of
# either proxy's CPU in `bench/profile-results.md`), cache misses and lock
# contention. A count also moves a little with how many events each wake-up
# finds (under valgrind the threads run one at a time), so each figure is
# the median of $ROUNDS runs, and the spread is printed.
#
# Per subject: an upstream nginx (one worker, the 601-byte chat completion
# of bench/gateway.sh), the proxy under callgrind (Levee with the full
# policy on and its default workers; nginx with one worker, no master),
# two runs: one with $WARMUP s of load by wrk (-t1, $CONNS connections),
# one with $WARMUP + $SECONDS_LOAD s (under callgrind either proxy answers
# ~800 requests a second); the difference in the instructions the process
# executed over the difference in requests answered is the cost of one
# request, without starting up, warming up or stopping. Loopback only;
# every process is stopped on exit.
#
# CACHE=1 runs valgrind's cachegrind instead, with its cache simulation
# (the host's L1 sizes: 32 KiB of instructions on one machine these
# figures were taken on, 64 KiB on another; 48 KiB of data on both), and
# adds per request the L1 instruction-cache misses and the L1 data-cache
# misses (reads and writes). A simulation, not the hardware: no prefetcher,
# no micro-op cache. It shows whose code no longer fits in L1 and has to be
# fetched again from L2 each request: Levee's request path executes 146 KiB
# of distinct code a request against nginx's 62 KiB, and so takes 3.3x
# nginx's instruction-cache misses for 1.63x its instructions with a 32 KiB
# L1i, and 25x with a 64 KiB one, which nginx's fits.
#
# FOOTPRINT=1 (with callgrind) also records each instruction's address and
# adds the hot code: the 64-byte lines of machine code executed at least
# 0.45 times a request (bench/code-footprint.py), in KiB.
#
# ATOMICS=1 (with callgrind) also records each instruction's address and
# adds the atomic read-modify-writes a request (bench/atomics.py: `lock`-
# prefixed instructions and `xchg` with memory): a reference count, a
# mutex's lock or unlock, a shared counter's add, a task's state change.
# Callgrind counts each as one instruction; on these machines one costs
# ~4.5 ns, as much as ~15 plain ones.
#
# Environment: SECONDS_LOAD (10), WARMUP (2), CONNS (16), ROUNDS (3), CACHE (0),
# FOOTPRINT (0), ATOMICS (0),
# NGINX_TOO (1: also count nginx as the reverse proxy), UPSTREAM_FIELDS
# (empty: nginx's own five answer fields; `openai`: 17 more, the ones an
# OpenAI chat completion carries, which each proxy parses and passes on),
# CALLER_FIELDS (empty: wrk's host, length and type; `sdk`: the 14 more
# OpenAI's Python SDK sends, which a proxy parses and mostly drops).
# Progress on stderr only on a terminal; the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_LOAD="${SECONDS_LOAD:-10}"
WARMUP="${WARMUP:-2}"
CONNS="${CONNS:-16}"
ROUNDS="${ROUNDS:-3}"
NGINX_TOO="${NGINX_TOO:-1}"
UPSTREAM_FIELDS="${UPSTREAM_FIELDS:-}"
CALLER_FIELDS="${CALLER_FIELDS:-}"
CACHE="${CACHE:-0}"
FOOTPRINT="${FOOTPRINT:-0}"
ATOMICS="${ATOMICS:-0}"
if [ "$CACHE" = 1 ]; then
  TOOL=(--tool=cachegrind --cache-sim=yes); OUT_OPT=--cachegrind-out-file
elif [ "$FOOTPRINT" = 1 ] || [ "$ATOMICS" = 1 ]; then
  TOOL=(--tool=callgrind --dump-instr=yes); OUT_OPT=--callgrind-out-file
else
  TOOL=(--tool=callgrind --dump-instr=no); OUT_OPT=--callgrind-out-file
fi

. bench/lib.sh
bench_output instructions.sh
need valgrind valgrind
need wrk wrk
need nginx nginx
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
if [ $# -eq 0 ]; then levee_bin release; set -- "$LEVEE_BIN"; fi
bench_work
trap 'exit 130' INT TERM
export LEVEE_LOG=warn

UP_PORT="$(free_port)"

nginx_conf() { # dir workers body
  mkdir -p "$1/tmp"
  cat >"$1/nginx.conf" <<NGX
worker_processes $2; daemon off; pid $1/nginx.pid; error_log $1/error.log warn;
events { worker_connections 8192; }
http {
  access_log off; keepalive_requests 10000000; keepalive_timeout 75s;
  client_body_temp_path $1/tmp/body; proxy_temp_path $1/tmp/proxy;
  fastcgi_temp_path $1/tmp/fastcgi; uwsgi_temp_path $1/tmp/uwsgi; scgi_temp_path $1/tmp/scgi;
$3
}
NGX
}
case "$UPSTREAM_FIELDS" in
  "") fields="" ;;
  openai) fields="$(provider_fields_nginx)" ;;
  *) echo "instructions.sh: UPSTREAM_FIELDS is empty or openai, not $UPSTREAM_FIELDS" >&2; exit 2 ;;
esac
nginx_conf "$work/up" 1 "server { listen 127.0.0.1:$UP_PORT; location / { default_type application/json; $fields return 200 '$COMPLETION'; } }"
"$NGINX" -e "$work/up/error.log" -p "$work/up" -c "$work/up/nginx.conf" &
pids+=($!)

cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function done(summary, latency, requests)
  io.write(string.format("WRKRESULT %d %d\n", summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
LUA
printf 'wrk.body = %s\n' "'$REQUEST'" >>"$work/post.lua"
case "$CALLER_FIELDS" in
  "") ;;
  sdk) sdk_fields_lua >>"$work/post.lua" ;;
  *) echo "instructions.sh: CALLER_FIELDS is empty or sdk, not $CALLER_FIELDS" >&2; exit 2 ;;
esac

proxy_yaml "$UP_PORT"

wait_post() { # url
  for _ in $(seq 1 600); do
    curl -s -o /dev/null -m 5 -X POST -H 'content-type: application/json' -d "$REQUEST" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "instructions.sh: $1 never answered" >&2
  return 1
}

load() { # url seconds -> "requests errors"
  wrk -t1 -c"$CONNS" -d"$2"s -s "$work/post.lua" "$1" | awk '/^WRKRESULT/ {print $2, $3}'
}

# One run of a subject under valgrind with `secs` seconds of load: writes
# "requests errors instructions [L1i-misses L1d-misses]" to $work/line (not
# through a command substitution: its subshell would keep the valgrind pid
# from the cleanup list). The counts are the whole process's, written when
# it exits.
count() { # name port secs command...
  local name="$1" port="$2" secs="$3"; shift 3
  local out="$work/cg.$name"
  rm -f "$out"*
  valgrind "${TOOL[@]}" "$OUT_OPT=$out" "$@" 2>"$work/$name.vg.log" &
  local vp=$!
  pids+=($vp)
  local url="http://127.0.0.1:$port/v1/chat/completions"
  wait_post "$url"
  local got; got="$(load "$url" "$secs")"
  kill "$vp"; wait "$vp" 2>/dev/null || true
  # The summary's counts, in the order its `events:` line names them.
  local counts; counts="$(awk '/^events:/ {for (i = 2; i <= NF; i++) col[$i] = i}
    /^summary:/ {if (col["I1mr"]) print $col["Ir"], $col["I1mr"], $col["D1mr"] + $col["D1mw"]; else print $2; exit}' "$out")"
  if [ "$ATOMICS" = 1 ]; then counts="${counts:-0} $(python3 bench/atomics.py "$out")"; fi
  echo "$got ${counts:-0}" >"$work/line"
}

# Instructions per request of one subject: two runs, short and long; what
# starting, warming up and stopping cost is in both and cancels out. Each
# run's line: requests, errors, instructions, then `b` and `c`: the L1i and
# L1d misses (CACHE=1), or the atomic read-modify-writes (ATOMICS=1, `b`).
per_request() { # name port command...
  local name="$1" port="$2"; shift 2
  count "$name" "$port" "$WARMUP" "$@"
  read -r n1 e1 ir1 b1 c1 <"$work/line"
  count "$name" "$port" "$(( WARMUP + SECONDS_LOAD ))" "$@"
  read -r n2 e2 ir2 b2 c2 <"$work/line"
  if [ "${e1:-1}" != 0 ] || [ "${e2:-1}" != 0 ] || [ "$(( ${n2:-0} - ${n1:-0} ))" -lt 100 ] \
    || [ "${ir1:-0}" = 0 ] || [ "${ir2:-0}" = 0 ]; then
    echo "instructions.sh: $name: runs of ${n1:-no} and ${n2:-no} requests, ${e1:-?} and ${e2:-?} errors, ${ir1:-0} and ${ir2:-0} instructions" >&2
    exit 1
  fi
  say "  $name: $ir1 instructions for $n1 requests, $ir2 for $n2"
  if [ "$CACHE" = 1 ]; then
    echo "$(( (ir2 - ir1) / (n2 - n1) )) $(( (b2 - b1) / (n2 - n1) )) $(( (c2 - c1) / (n2 - n1) ))" >"$work/line"
  elif [ "$ATOMICS" = 1 ]; then
    echo "$(( (ir2 - ir1) / (n2 - n1) )) $(awk -v a="$b1" -v b="$b2" -v n="$(( n2 - n1 ))" 'BEGIN {printf "%.1f", (b - a) / n}')" >"$work/line"
  elif [ "$FOOTPRINT" = 1 ]; then
    local kib; kib="$(python3 bench/code-footprint.py "$work/cg.$name" "$n2" | awk '{print $5}')"
    echo "$(( (ir2 - ir1) / (n2 - n1) )) $kib" >"$work/line"
  else
    echo $(( (ir2 - ir1) / (n2 - n1) )) >"$work/line"
  fi
}

# Per proxy: each round's columns (instructions, then the L1i and L1d
# misses or the hot code), joined by `/`, one word a round.
declare -A RESULTS
subjects=()
for bin in "$@"; do subjects+=("levee:$bin"); done
if [ "$NGINX_TOO" = 1 ]; then subjects+=("nginx:"); fi
for r in $(seq 1 "$ROUNDS"); do
  for s in "${subjects[@]}"; do
    kind="${s%%:*}"; bin="${s#*:}"
    port="$(free_port)"
    if [ "$kind" = nginx ]; then
      name=nginx
      dir="$work/px$r"
      nginx_conf "$dir" 1 "upstream up { server 127.0.0.1:$UP_PORT; keepalive 512; }
server { listen 127.0.0.1:$port; location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
      sed -i 's/^worker_processes 1;/worker_processes 1; master_process off;/' "$dir/nginx.conf"
      say "round $r/$ROUNDS: nginx (reverse proxy) under callgrind"
      per_request nginx "$port" "$NGINX" -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf"
    else
      name="$(basename "$bin")"
      admin="$(free_port)"
      say "round $r/$ROUNDS: $name under callgrind"
      per_request "$name" "$port" "$bin" serve --config "$work/levee.yaml" \
        --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin"
    fi
    read -r -a cols <"$work/line"
    RESULTS["$name"]+="$(IFS=/; echo "${cols[*]}") "
  done
done

if [ "$CACHE" = 1 ]; then
  heads=("instructions per request" "L1i misses per request" "L1d misses per request")
elif [ "$FOOTPRINT" = 1 ]; then
  heads=("instructions per request" "hot code KiB")
elif [ "$ATOMICS" = 1 ]; then
  heads=("instructions per request" "atomic read-modify-writes per request")
else
  heads=("instructions per request (median of $ROUNDS)")
fi
# The median of column $1 of the rounds given.
median() {
  local c="$1" r v; shift
  for r in "$@"; do IFS=/ read -r -a v <<<"$r"; echo "${v[$c]}"; done |
    sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
printf '| proxy |'; printf ' %s |' "${heads[@]}"; echo ' rounds |'
printf '|---|'; for _ in "${heads[@]}"; do printf -- '---|'; done; echo '---|'
for name in "${!RESULTS[@]}"; do
  read -r -a rounds <<<"${RESULTS[$name]}"
  printf '| %s |' "$name"
  for c in "${!heads[@]}"; do printf ' %s |' "$(median "$c" "${rounds[@]}")"; done
  echo " ${rounds[*]} |"
done
