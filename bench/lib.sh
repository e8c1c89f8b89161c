# Shared pieces of the bench scripts; source it after `cd` to the repo root.
# (Their embedded Python shares bench/benchlib.py.)
#
#   bench_output NAME [ARG]     say MSG: progress on stderr when it is a terminal;
#                               die MSG: "NAME: MSG" on stderr, exit 1; ARG
#                               `--json` (a script's first argument) sets JSON=1
#                               and keeps say quiet
#   bench_init [release|debug]  levee_bin, then bench_work
#   levee_bin [release|debug]   sets LEVEE_BIN (builds it unless LEVEE_BIN is set;
#                               cargo's output shown on a terminal or on failure)
#   bench_work                  sets $work (a temp dir) and pids=(); on exit every
#                               pid in pids is stopped and waited for, $work removed
#   start_mock [FLAGS...]       `levee mock` on a free port; sets $mock (host:port)
#   start_serve NAME [FLAGS...] `levee serve --config $work/levee.yaml --log-format json`
#                               logging to $work/NAME.log; sets $serve_pid and
#                               $serve_line (its JSON "listening" line)
#   gateway_yaml PROVIDER [LINE]
#                               writes $work/levee.yaml: listen and admin on free
#                               ports, LINE, and PROVIDER (openai) at $mock
#   wait_for FILE REGEX         prints the first match in FILE, within 20 s
#   wait_http URL [SECONDS]     until a POST of REQUEST to URL answers 2xx (10 s)
#   free_port                   prints a free loopback TCP port
#   need TOOL PACKAGE           installs PACKAGE with apt-get if TOOL is missing
#                               (from PATH or /usr/sbin)
#   render_conf TEMPLATE OUT [KEY=VALUE...]
#                               writes TEMPLATE (bench/proxies/*.in) to OUT with
#                               @WORK@, @COMPLETION@ and each @KEY@ replaced
#   start_proxies               the static nginx upstream, nginx and HAProxy as
#                               reverse proxies in front of it (bench/proxies/*.in,
#                               a worker and a thread per CPU); sets UP_PORT,
#                               PX_PORT, HA_PORT and UP_PID, PX_PID, HA_PID
#   proxy_yaml UP_PORT          writes $work/levee.yaml: Levee with the full policy
#                               on in front of an upstream at 127.0.0.1:UP_PORT,
#                               in-flight caps out of a saturation run's way
#
# COMPLETION (the 601-byte chat completion `levee mock` gives, which the
# proxy benchmarks' upstream nginx answers) and REQUEST (the chat request
# they POST) are set for every script.

bench_output() {
  BENCH_NAME="$1"
  JSON="${JSON:-}"
  [ "${2:-}" = "--json" ] && JSON=1
  if [ -t 2 ] && [ -z "$JSON" ]; then TTY=1; else TTY=""; fi
  say() { if [ -n "$TTY" ]; then printf '%s\n' "$*" >&2; fi; }
  die() { printf '%s: %s\n' "$BENCH_NAME" "$*" >&2; exit 1; }
}

bench_init() {
  levee_bin "$@"
  bench_work
}

levee_bin() {
  local profile="${1:-release}" flags=(-p levee)
  [ "$profile" = release ] && flags+=(--release)
  if [ -z "${LEVEE_BIN:-}" ]; then
    if [ -t 2 ]; then
      cargo build "${flags[@]}" >&2
    else
      cargo build -q "${flags[@]}" 2>/dev/null || cargo build "${flags[@]}" >&2
    fi || { echo "bench: cargo build ${flags[*]} failed" >&2; exit 1; }
    LEVEE_BIN="${CARGO_TARGET_DIR:-target}/$profile/levee"
  fi
  [ -x "$LEVEE_BIN" ] || { echo "bench: no levee binary at $LEVEE_BIN" >&2; exit 1; }
}

bench_work() {
  work="$(mktemp -d)"
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}

wait_for() {
  for _ in $(seq 1 400); do
    if m="$(grep -m1 -oE "$2" "$1" 2>/dev/null)"; then echo "$m"; return 0; fi
    sleep 0.05
  done
  echo "timed out waiting for /$2/ in $1:" >&2; cat "$1" >&2; return 1
}

wait_http() {
  local _
  for _ in $(seq 1 $(( ${2:-10} * 20 ))); do
    if curl -fs -o /dev/null -X POST -H 'content-type: application/json' -d "$REQUEST" "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

need() {
  command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || {
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  }
}

start_mock() {
  "$LEVEE_BIN" mock --listen 127.0.0.1:0 "$@" 2>"$work/mock.log" &
  pids+=($!)
  mock="$(wait_for "$work/mock.log" 'listening on [0-9.:]+' | awk '{print $3}')"
}

start_serve() {
  local name="$1"; shift
  "$LEVEE_BIN" serve --config "$work/levee.yaml" --log-format json "$@" 2>"$work/$name.log" &
  serve_pid=$!
  pids+=("$serve_pid")
  serve_line="$(wait_for "$work/$name.log" '\{.*"levee gateway listening".*\}')"
}

gateway_yaml() {
  {
    echo "listen: 127.0.0.1:0"
    echo "admin: { listen: 127.0.0.1:0 }"
    if [ -n "${2:-}" ]; then echo "$2"; fi
    echo "providers:"
    echo "  $1: { api: openai, base_url: \"http://$mock\" }"
  } >"$work/levee.yaml"
}

COMPLETION='{"id":"chatcmpl-levee000000000001","object":"chat.completion","created":1796011552,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"This is a mock response from Levee.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":18,"completion_tokens":8,"total_tokens":26,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_levee_mock"}'
REQUEST='{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello."}],"max_tokens":64}'
# The request-head fields OpenAI's Python SDK sends besides host, length
# and content type (14; as it spells them), for runs that ask for an SDK's
# request rather than wrk's bare one: CALLER_FIELDS=sdk. Lines of wrk Lua.
sdk_fields_lua() {
  cat <<'LUA'
wrk.headers["Accept-Encoding"] = "gzip, deflate"
wrk.headers["Connection"] = "keep-alive"
wrk.headers["authorization"] = "Bearer sk-0123456789abcdefghijklmnopqrstuvwxyz0123456789ab"
wrk.headers["accept"] = "application/json"
wrk.headers["user-agent"] = "OpenAI/Python 3.57.0"
wrk.headers["x-stainless-lang"] = "python"
wrk.headers["x-stainless-package-version"] = "3.57.0"
wrk.headers["x-stainless-os"] = "Linux"
wrk.headers["x-stainless-arch"] = "x64"
wrk.headers["x-stainless-runtime"] = "CPython"
wrk.headers["x-stainless-runtime-version"] = "3.11.7"
wrk.headers["x-stainless-async"] = "false"
wrk.headers["x-stainless-retry-count"] = "0"
wrk.headers["x-stainless-read-timeout"] = "600"
LUA
}

# The answer-head fields an OpenAI chat completion carries besides the
# framing ones (17; names as the provider sends them, values of their
# usual length), for runs that ask for a provider's head rather than
# nginx's bare one: UPSTREAM_FIELDS=openai.
provider_fields_nginx() {
  cat <<'NGX'
add_header openai-organization user-0123456789abcdefghij; add_header openai-processing-ms 312;
add_header openai-project proj_0123456789abcdefghijklmn; add_header openai-version 2020-10-01;
add_header x-ratelimit-limit-requests 10000; add_header x-ratelimit-limit-tokens 2000000;
add_header x-ratelimit-remaining-requests 9999; add_header x-ratelimit-remaining-tokens 1999980;
add_header x-ratelimit-reset-requests 6ms; add_header x-ratelimit-reset-tokens 0s;
add_header x-request-id req_0123456789abcdef0123456789abcdef;
add_header strict-transport-security "max-age=31536000; includeSubDomains; preload";
add_header cf-cache-status DYNAMIC; add_header x-content-type-options nosniff;
add_header access-control-expose-headers X-Request-ID; add_header cf-ray 8f1e2d3c4b5a6978-IAD;
add_header alt-svc 'h3=":443"; ma=86400';
NGX
}

render_conf() {
  local t="$1" out="$2"; shift 2
  local s kv
  s="$(cat "$t")"
  s="${s//@WORK@/$work}"; s="${s//@COMPLETION@/$COMPLETION}"
  for kv in "$@"; do s="${s//@${kv%%=*}@/${kv#*=}}"; done
  printf '%s\n' "$s" >"$out"
}

start_proxies() {
  local nginx haproxy ports
  nginx="$(command -v nginx || echo /usr/sbin/nginx)"
  haproxy="$(command -v haproxy || echo /usr/sbin/haproxy)"
  UP_PORT="$(free_port)"; PX_PORT="$(free_port)"; HA_PORT="$(free_port)"
  ports=(UP_PORT="$UP_PORT" PX_PORT="$PX_PORT" HA_PORT="$HA_PORT")
  mkdir -p "$work/up/tmp" "$work/px/tmp"
  render_conf bench/proxies/upstream-nginx.conf.in "$work/up/nginx.conf" "${ports[@]}"
  render_conf bench/proxies/nginx.conf.in "$work/px/nginx.conf" "${ports[@]}" WORKERS=auto
  render_conf bench/proxies/haproxy.cfg.in "$work/haproxy.cfg" "${ports[@]}" THREADS="$(nproc)"
  chmod -R a+rwx "$work/up/tmp" "$work/px/tmp"
  "$haproxy" -c -q -f "$work/haproxy.cfg" || die "HAProxy refused its config"
  "$nginx" -e "$work/up/error.log" -p "$work/up" -c "$work/up/nginx.conf" &
  UP_PID=$!; pids+=("$UP_PID")
  "$nginx" -e "$work/px/error.log" -p "$work/px" -c "$work/px/nginx.conf" &
  PX_PID=$!; pids+=("$PX_PID")
  "$haproxy" -db -f "$work/haproxy.cfg" 2>"$work/haproxy.log" &
  HA_PID=$!; pids+=("$HA_PID")
}

proxy_yaml() {
  cat >"$work/levee.yaml" <<YAML
providers:
  p: { api: openai, base_url: "http://127.0.0.1:$1", max_in_flight: 100000 }
routes:
  - targets: [p]
    max_in_flight: 100000
YAML
}
