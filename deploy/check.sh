#!/usr/bin/env bash
# Checks what deploy/ ships, without Docker or a cluster:
# - every YAML file under deploy/ parses (with PyYAML, when python3 has it);
# - deploy/levee.container.yaml and the config embedded in the Kubernetes
#   ConfigMap pass `levee check` (provider keys may be unset here);
# - the Dockerfile builds with --locked, runs as a numeric non-root user and
#   has a HEALTHCHECK, and that HEALTHCHECK command (run here with bash)
#   passes against a live `levee serve` of the container config, whose admin
#   listener also answers a probe by IP address as kubelet sends it;
# - the Kubernetes grace period and the systemd stop timeout exceed
#   shutdown_grace;
# - `systemd-analyze verify` finds nothing in the unit (when installed).
#
# Usage: deploy/check.sh   (LEVEE_BIN=path/to/levee to skip the build)
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "deploy/check.sh: $*" >&2; exit 1; }
note() { echo "deploy/check.sh: $*"; }

if [ -z "${LEVEE_BIN:-}" ]; then
  cargo build -q --locked -p levee
  LEVEE_BIN=target/debug/levee
fi
[ -x "$LEVEE_BIN" ] || fail "no levee binary at $LEVEE_BIN"

tmp="$(mktemp -d)"
server=
cleanup() {
  if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- the config embedded in the ConfigMap (a `levee.yaml: |` block) -------
k8s=deploy/kubernetes/levee.yaml
awk '
  /^[[:space:]]*levee\.yaml: \|[[:space:]]*$/ { inside = 1; n = -1; next }
  inside {
    if ($0 ~ /^[[:space:]]*$/) { print ""; next }
    match($0, /^ */)
    if (n < 0) n = RLENGTH
    if (RLENGTH < n) exit
    print substr($0, n + 1)
  }
' "$k8s" > "$tmp/configmap-levee.yaml"
[ -s "$tmp/configmap-levee.yaml" ] || fail "$k8s: no 'levee.yaml: |' block found"

# --- YAML: every file parses; the awk extraction equals PyYAML's value ----
py=
for p in .venv/bin/python python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import yaml' 2>/dev/null; then py="$p"; break; fi
done
if [ -n "$py" ]; then
  "$py" - "$tmp/configmap-levee.yaml" <<'EOF' || fail "YAML checks failed"
import pathlib, re, sys, yaml

def dur_s(v):
    m = re.fullmatch(r"(\d+)(ms|s|m)", str(v))
    assert m, f"unexpected duration {v!r}"
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60}[m[2]]

files = sorted(p for p in pathlib.Path("deploy").rglob("*") if p.suffix in (".yaml", ".yml"))
docs = {}
for f in files:
    docs[str(f)] = [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
print(f"deploy/check.sh: {len(files)} YAML files parse")

k8s = docs["deploy/kubernetes/levee.yaml"]
kinds = {d["kind"]: d for d in k8s}
cm = kinds["ConfigMap"]["data"]["levee.yaml"]
extracted = pathlib.Path(sys.argv[1]).read_text()
assert cm.rstrip("\n") == extracted.rstrip("\n"), "awk extraction differs from the ConfigMap's value"
cfg = yaml.safe_load(cm)
grace = dur_s(cfg.get("shutdown_grace", "30s"))

pod = kinds["Deployment"]["spec"]["template"]["spec"]
c = pod["containers"][0]
pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
pre_s = int(pre[1]) if pre[:1] == ["sleep"] else 0
assert pod["terminationGracePeriodSeconds"] > pre_s + grace, "terminationGracePeriodSeconds must exceed preStop + shutdown_grace"
assert pod["securityContext"]["runAsNonRoot"] is True
assert c["securityContext"]["readOnlyRootFilesystem"] is True
admin_port = int(cfg["admin"]["listen"].rsplit(":", 1)[1])
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
assert ports["admin"] == admin_port and str(cfg["admin"]["listen"]).startswith("0.0.0.0:")
assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
assert cfg["state"]["backend"] == "redis"
assert cfg["state"].get("replicas", 1) == kinds["Deployment"]["spec"]["replicas"], "state.replicas differs from the Deployment's replicas"
assert kinds["PodDisruptionBudget"]["spec"]["minAvailable"] == 1

unit = pathlib.Path("deploy/systemd/levee.service").read_text()
m = re.search(r"^TimeoutStopSec=(\d+)s?$", unit, re.M)
assert m and int(m[1]) > grace, "TimeoutStopSec must exceed shutdown_grace"
print("deploy/check.sh: Kubernetes and systemd timings and security settings hold")
EOF
else
  note "skipped the YAML parse and the Kubernetes checks: python3 has no PyYAML"
fi

# --- levee check ------------------------------------------------------------
for f in deploy/levee.container.yaml "$tmp/configmap-levee.yaml"; do
  "$LEVEE_BIN" check --config "$f" --allow-missing-env >/dev/null 2>"$tmp/check.err" ||
    { cat "$tmp/check.err" >&2; fail "levee check refused $f"; }
done
note "levee check passes deploy/levee.container.yaml and the ConfigMap's config"

# --- Dockerfile ------------------------------------------------------------
df=deploy/Dockerfile
grep -Eq '^USER [1-9][0-9]*(:[0-9]+)?$' "$df" || fail "$df: no numeric non-root USER"
grep -q '^HEALTHCHECK ' "$df" || fail "$df: no HEALTHCHECK"
grep -q '^EXPOSE 8080 9090$' "$df" || fail "$df: EXPOSE 8080 9090 missing"
grep -q 'cargo build --release --locked -p levee' "$df" || fail "$df: not a --locked release build of levee"
grep -q '^ENTRYPOINT \["levee", "serve", "--config", "/etc/levee/levee.yaml"\]$' "$df" || fail "$df: unexpected ENTRYPOINT"
grep -q '^listen: 0\.0\.0\.0:8080' deploy/levee.container.yaml &&
  grep -q '^admin: { listen: 0\.0\.0\.0:9090 }' deploy/levee.container.yaml ||
  fail "deploy/levee.container.yaml: the container must listen on 0.0.0.0:8080 and 0.0.0.0:9090 (EXPOSE, HEALTHCHECK)"
# Every path COPY takes from the build context exists.
while read -r src; do
  [ -e "$src" ] || fail "$df: COPY source $src does not exist"
done < <(grep -E '^COPY ' "$df" | grep -v -- '--from=' | awk '{ for (i = 2; i < NF; i++) print $i }')
# The HEALTHCHECK command, as Docker runs it, against a live gateway.
hc="$(sed -n '/^HEALTHCHECK/,/^$/p' "$df" | sed -n 's/^ *CMD \(\[.*\]\)$/\1/p')"
[ -n "$hc" ] || fail "$df: no exec-form HEALTHCHECK CMD"
ANTHROPIC_API_KEY=check OPENAI_API_KEY=check \
  "$LEVEE_BIN" serve --config deploy/levee.container.yaml \
  --listen 127.0.0.1:0 --admin 0.0.0.0:0 --workers 1 >"$tmp/serve.log" 2>&1 &
server=$!
admin=
for _ in $(seq 100); do
  admin="$(sed -n 's/.*listening.* admin=0\.0\.0\.0:\([0-9]*\).*/\1/p' "$tmp/serve.log")"
  [ -n "$admin" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/serve.log" >&2; fail "levee serve of the container config exited"; }
  sleep 0.05
done
[ -n "$admin" ] || { cat "$tmp/serve.log" >&2; fail "levee serve did not start"; }
python3 - "$hc" "$admin" <<'EOF' || fail "$df: the HEALTHCHECK command fails against a ready gateway"
import json, subprocess, sys
argv = [a.replace("9090", sys.argv[2]) for a in json.loads(sys.argv[1])]
sys.exit(subprocess.run(argv).returncode)
EOF
status() { # status HOST PATH: the admin listener's status code for that Host
  exec 3<>"/dev/tcp/127.0.0.1/$admin"
  printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3
  local _ code _rest
  read -r _ code _rest <&3
  exec 3<&-
  echo "$code"
}
[ "$(status "10.1.2.3:$admin" /healthz)" = 200 ] || fail "the admin listener refused a probe by IP address (kubelet's Host)"
[ "$(status "10.1.2.3:$admin" /readyz)" = 200 ] || fail "/readyz by IP address is not 200"
[ "$(status "levee.example:$admin" /readyz)" = 421 ] || fail "the admin listener answered a DNS name as Host"
kill -TERM "$server"
wait "$server" || fail "levee serve did not exit cleanly on SIGTERM"
server=
note "Dockerfile: non-root USER, HEALTHCHECK passes against levee serve; admin answers probes by IP"

# --- systemd ---------------------------------------------------------------
unit=deploy/systemd/levee.service
if command -v systemd-analyze >/dev/null 2>&1; then
  # verify requires ExecStart's binary to exist: point it at the one built.
  sed "s#/usr/local/bin/levee#$(cd "$(dirname "$LEVEE_BIN")" && pwd)/$(basename "$LEVEE_BIN")#" "$unit" >"$tmp/levee.service"
  out="$(systemd-analyze verify "$tmp/levee.service" 2>&1)" || { echo "$out" >&2; fail "systemd-analyze verify failed"; }
  [ -z "$out" ] || { echo "$out" >&2; fail "systemd-analyze verify reported problems in $unit"; }
  note "systemd-analyze verify: $unit is clean"
else
  note "skipped systemd-analyze verify: not installed"
fi
