#!/usr/bin/env bash
# Where a proxied request's cost goes, per request, in counts that do not
# depend on the machine's other load: user-space instructions (valgrind's
# callgrind), heap allocations (valgrind's dhat) and system calls (strace
# -c), for Levee, nginx and HAProxy proxying the same request.
#
#   bench/percall.sh [--json]
#
# Each proxy runs with one worker (Levee `--workers 1`, nginx
# `worker_processes 1` without a master, HAProxy `nbthread 1`) in front of
# a static nginx upstream (the 601-byte chat completion of bench/lib.sh),
# under each tool in turn, twice: once sent $N1 requests, once $N2, over
# $CONNS keep-alive connections (bench/percall_client.py: a fixed count,
# not a fixed time). The difference between the two runs' counts over
# $N2 - $N1 is the cost of one request without start-up, warm-up or exit.
# Levee has the full policy on (bench/lib.sh's proxy_yaml) and its request
# log off (LEVEE_LOG=warn), as the proxies' access logs are off.
# What the counts do not show: time in the kernel per call, cache misses,
# and how many events each wake-up finds (under valgrind and strace the
# proxies run slower, so each wake-up finds fewer).
#
# Environment: N1 (1000), N2 (4000), CONNS (16), LEVEE_BIN (skip the
# release build), LEVEE_SYSALLOC_BIN (skip the build with the system
# allocator: `--features system-alloc`, which dhat can count). Installs valgrind, strace, nginx and HAProxy with apt-get
# when missing. Loopback only; stops every process it starts. Progress on
# stderr only on a terminal and without --json; the table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
N1="${N1:-1000}"
N2="${N2:-4000}"
CONNS="${CONNS:-16}"
. bench/lib.sh
bench_output percall.sh "${1:-}"
need valgrind valgrind
need strace strace
need nginx nginx
need haproxy haproxy
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
HAPROXY="$(command -v haproxy || echo /usr/sbin/haproxy)"
levee_bin release
# dhat sees malloc, not the jemalloc the shipped binary links: heap
# allocations are counted on a build with the system allocator (the same
# code asking for the same blocks).
if [ -z "${LEVEE_SYSALLOC_BIN:-}" ]; then
  say "building levee with the system allocator (release, target/system-alloc)..."
  cargo build -q --release -p levee --features system-alloc --target-dir target/system-alloc >&2
  LEVEE_SYSALLOC_BIN=target/system-alloc/release/levee
fi
bench_work
trap 'exit 130' INT TERM
export LEVEE_LOG=warn

UP_PORT="$(free_port)"; PORT="$(free_port)"
ports=(UP_PORT="$UP_PORT" PX_PORT="$PORT" HA_PORT="$PORT")
mkdir -p "$work/up/tmp" "$work/px/tmp"
render_conf bench/proxies/upstream-nginx.conf.in "$work/up/nginx.conf" "${ports[@]}"
render_conf bench/proxies/nginx.conf.in "$work/px/nginx.conf" "${ports[@]}" WORKERS=1
# No master under the tools: the one process is the worker.
sed -i 's/^master_process on;/master_process off;/' "$work/px/nginx.conf"
render_conf bench/proxies/haproxy.cfg.in "$work/haproxy.cfg" "${ports[@]}" THREADS=1
chmod -R a+rwx "$work/up/tmp" "$work/px/tmp"
proxy_yaml "$UP_PORT"
"$NGINX" -e "$work/up/error.log" -p "$work/up" -c "$work/up/nginx.conf" &
pids+=($!)

subject_cmd() { # subject tool -> the command line, into CMD
  local bin="$LEVEE_BIN"
  [ "$2" = allocations ] && bin="$LEVEE_SYSALLOC_BIN"
  case "$1" in
    levee) CMD=("$bin" serve --config "$work/levee.yaml" --listen "127.0.0.1:$PORT"
                --admin "127.0.0.1:$(free_port)" --workers 1) ;;
    nginx) CMD=("$NGINX" -e "$work/px/error.log" -p "$work/px" -c "$work/px/nginx.conf") ;;
    haproxy) CMD=("$HAPROXY" -db -f "$work/haproxy.cfg") ;;
  esac
}


# One run: SUBJECT under TOOL, sent N requests; prints the tool's count.
measure() { # tool subject n
  local tool="$1" subject="$2" n="$3" out="$work/$1-$2-$3" pid got
  mkdir -p "$out"
  subject_cmd "$subject" "$tool"
  case "$tool" in
    instructions) valgrind --tool=callgrind --trace-children=yes \
      --callgrind-out-file="$out/cg.%p" --log-file="$out/log.%p" "${CMD[@]}" 2>/dev/null & ;;
    allocations) valgrind --tool=dhat --trace-children=yes \
      --dhat-out-file="$out/dhat.%p" --log-file="$out/log.%p" "${CMD[@]}" 2>/dev/null & ;;
    syscalls) strace -f -c -o "$out/strace.txt" "${CMD[@]}" 2>/dev/null & ;;
  esac
  pid=$!
  # Under valgrind a start takes up to ~20 s.
  wait_http "http://127.0.0.1:$PORT/v1/chat/completions" 60 || die "$subject under $tool did not come up"
  got="$(.venv/bin/python bench/percall_client.py "127.0.0.1:$PORT" "$n" "$CONNS" "$REQUEST" 2>/dev/null \
    || python3 bench/percall_client.py "127.0.0.1:$PORT" "$n" "$CONNS" "$REQUEST")"
  [ "$got" = "$n" ] || die "$subject under $tool answered $got of $n with a 200"
  # valgrind runs as the subject's own pid; strace is the subject's
  # parent, and writes its summary once the subject has exited.
  if [ "$tool" = syscalls ]; then
    kill -TERM $(pgrep -P "$pid") 2>/dev/null || true
  else
    kill -TERM "$pid" 2>/dev/null || true
  fi
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  case "$tool" in
    instructions) cat "$out"/cg.* | awk '/^summary:|^totals:/ { s += $2 } END { print s + 0 }' ;;
    allocations) cat "$out"/log.* | awk '/Total:/ { gsub(",", "", $0); for (i = 1; i <= NF; i++) if ($i == "in") b += $(i + 1) } END { print b + 0 }' ;;
    # strace -c: `% time, seconds, usecs/call, calls, [errors,] syscall`.
    syscalls) awk 'NR > 2 && $1 !~ /^-/ && $NF != "total" { print $NF "\t" $4 }' \
                "$out/strace.txt" >"$out/by-call.tsv"
              awk -F'\t' '{ s += $2 } END { print s + 0 }' "$out/by-call.tsv" ;;
  esac
}

ROWS="$work/rows.tsv"; : >"$ROWS"
for tool in instructions allocations syscalls; do
  for subject in levee nginx haproxy; do
    say "$subject under $tool: $N1 requests, then $N2"
    a="$(measure "$tool" "$subject" "$N1")"
    b="$(measure "$tool" "$subject" "$N2")"
    printf '%s\t%s\t%s\t%s\n' "$tool" "$subject" "$a" "$b" >>"$ROWS"
    say "    $(awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.1f per request", (b - a) / (n2 - n1) }')"
  done
done

python3 - "$ROWS" "$work" "$N1" "$N2" "$CONNS" "${JSON:-0}" <<'PY'
import json, os, sys
rows, work, n1, n2, conns, as_json = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
per = {}
for line in open(rows):
    tool, subject, a, b = line.split()
    per.setdefault(subject, {})[tool] = (float(b) - float(a)) / (n2 - n1)
# System calls by name, per request (the difference of the two runs).
calls = {}
for subject in per:
    def load(n):
        p = os.path.join(work, f"syscalls-{subject}-{n}", "by-call.tsv")
        d = {}
        for line in open(p) if os.path.exists(p) else []:
            name, count = line.rstrip("\n").split("\t")
            try:
                d[name] = d.get(name, 0) + int(count)
            except ValueError:
                pass
        return d
    a, b = load(n1), load(n2)
    calls[subject] = {k: (b.get(k, 0) - a.get(k, 0)) / (n2 - n1) for k in set(a) | set(b)}
if as_json:
    print(json.dumps({"requests": [n1, n2], "connections": int(conns), "per_request": per, "syscalls_by_name": calls}, indent=2))
    sys.exit(0)
print(f"Per proxied request: the difference of runs of {n1} and {n2} requests over {conns} keep-alive connections, one worker each")
print()
print("| proxy | instructions (user space) | heap allocations | system calls | top system calls |")
print("|---|---|---|---|---|")
for s in ("levee", "nginx", "haproxy"):
    x = per.get(s, {})
    top = sorted(((v, k) for k, v in calls.get(s, {}).items() if v >= 0.05), reverse=True)[:5]
    tops = ", ".join(f"{k} {v:.2f}" for v, k in top)
    print(f"| {s} | {x.get('instructions', 0):,.0f} | {x.get('allocations', 0):.1f} | {x.get('syscalls', 0):.2f} | {tops} |")
PY
