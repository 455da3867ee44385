#!/usr/bin/env bash
# Checks of the deployment files that need no Docker engine and no GPU (registered with ctest,
# label integration, in tests/integration/CMakeLists.txt). One check per invocation:
#   deploy_checks.sh compose     docker-compose 1.29 `config -q` accepts deploy/docker-compose.yml,
#                                and its GPU/NCCL/shutdown settings hang together
#   deploy_checks.sh dockerfile  every Dockerfile RUN calls scripts/docker-build-steps.sh and only it,
#                                with a step the script accepts (dry-run), plus non-root + healthcheck
#   deploy_checks.sh prometheus  `promtool check config` on deploy/prometheus/prometheus.yml, and its
#                                target is the frontend's --metrics-listen port in the compose file
#   deploy_checks.sh steps       the cpu image steps and the cuda bundle resolve (dry-run: every apt
#                                package has a candidate in Debian 12)
#   deploy_checks.sh selftest    each check above rejects a broken copy of its file
#   deploy_checks.sh stage BUILD_DIR
#                                the real `stage cpu` step on a finished build: binaries, the generated
#                                tiny model, the runtime package list, all libraries resolvable
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
# The files under test (overridable so that `selftest` can feed broken copies).
COMPOSE=${DEPLOY_COMPOSE:-$repo/deploy/docker-compose.yml}
DOCKERFILE=${DEPLOY_DOCKERFILE:-$repo/Dockerfile}
PROMETHEUS=${DEPLOY_PROMETHEUS:-$repo/deploy/prometheus/prometheus.yml}
fail() { echo "FAIL: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || fail "$1 not installed (it is in scripts/deps.txt: run scripts/setup.sh)"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check_compose() {
  need docker-compose
  local file="$COMPOSE"
  mkdir -p "$tmp/model"
  # config needs no engine: it only parses, validates against the bundled schema, interpolates.
  DITSERVE_MODEL_DIR="$tmp/model" docker-compose -f "$file" config -q
  DITSERVE_MODEL_DIR="$tmp/model" docker-compose -f "$file" config > "$tmp/resolved.yml"
  python3 - "$file" "$tmp/resolved.yml" <<'EOF'
import re, sys, yaml
raw = yaml.safe_load(open(sys.argv[1]))
cfg = yaml.safe_load(open(sys.argv[2]))
errors = []
def check(cond, msg):
    if not cond: errors.append(msg)

# docker-compose 1.29 rejects these; Compose v2 would accept them, so catch them here.
check("name" not in raw and "version" not in raw, "no top-level name:/version: (compose spec for 1.29)")
svcs = cfg["services"]
for n, s in svcs.items():
    check("gpus" not in s, f"{n}: use deploy.resources.reservations.devices, not gpus:")

def seconds(v):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(v))
    check(m is not None, f"cannot parse duration {v}")
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0) if m else 0

def flag(cmd, name, default=None):
    for i, a in enumerate(cmd):
        if a == f"--{name}" and i + 1 < len(cmd): return cmd[i + 1]
        if a.startswith(f"--{name}="): return a.split("=", 1)[1]
    return default

fe = svcs.get("frontend")
check(fe is not None, "a frontend service")
workers = sorted(n for n in svcs if re.fullmatch(r"worker\d+", n))
check(len(workers) == 4, f"four worker services, got {workers}")
fe_cmd = fe["command"]
check(fe_cmd[0] == "ditserve-frontend", "frontend runs ditserve-frontend")
check("deploy" not in fe, "the frontend reserves no GPU")
addrs = flag(fe_cmd, "workers", "").split(",")
check(len(addrs) == len(workers), "--workers lists every worker, in rank order")
drain = float(flag(fe_cmd, "drain-seconds", "30"))
check(seconds(fe.get("stop_grace_period", "10s")) > drain + 10,
      "frontend stop_grace_period exceeds --drain-seconds plus the worker shutdown")
check(fe.get("init") is True, "frontend init: true")
check(fe["healthcheck"]["test"][1:4] == ["ditserve-cli", "health", "--server"], "frontend gRPC healthcheck")
check(fe["healthcheck"]["test"][4].endswith(":" + flag(fe_cmd, "listen").rsplit(":", 1)[1]),
      "frontend healthcheck port is its --listen port")
check(any(str(m).startswith("/") and str(m).endswith(":/models:ro") for m in fe["volumes"]),
      "frontend mounts the model read-only")

net = {}
for r, n in enumerate(workers):
    w = svcs[n]
    cmd = w["command"]
    check(cmd[0] == "ditserve-worker", f"{n} runs ditserve-worker")
    check(flag(cmd, "rank") == str(r) and flag(cmd, "device-index") == str(r), f"{n}: --rank/--device-index {r}")
    port = flag(cmd, "listen", "").rsplit(":", 1)[-1]
    check(addrs[r] == f"{n}:{port}" if r < len(addrs) else False, f"frontend --workers[{r}] is {n}:{port}")
    check(w["healthcheck"]["test"][1:] == ["ditserve-cli", "health", "--server", f"127.0.0.1:{port}"],
          f"{n}: gRPC healthcheck on its own port")
    devs = w.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    check(len(devs) == 1 and devs[0].get("driver") == "nvidia" and devs[0].get("capabilities") == ["gpu"]
          and sorted(devs[0].get("device_ids", [])) == ["0", "1", "2", "3"] and "count" not in devs[0],
          f"{n}: reserves all four GPUs (NCCL P2P needs every GPU visible)")
    check(w.get("ipc") == "host" or w.get("shm_size"), f"{n}: ipc: host or a large shm_size")
    check(w.get("ulimits", {}).get("memlock") == -1, f"{n}: memlock unlimited")
    check(w.get("init") is True and w.get("restart"), f"{n}: init and a restart policy")
    env = w.get("environment", {})
    check(env.get("NCCL_SOCKET_IFNAME") and env.get("NCCL_NVLS_ENABLE") == "0", f"{n}: NCCL settings")
    check(seconds(w.get("stop_grace_period", "10s")) >= 30, f"{n}: a stop_grace_period for the last step")
    check(any(str(m).endswith(":/models:ro") for m in w["volumes"]), f"{n}: model read-only")
    net.setdefault(w.get("network_mode"), []).append(n)

# Shared loopback for NCCL: every worker in one namespace, whose holder carries the names.
check(len(net) == 1, f"all workers share one network_mode, got {net}")
mode = next(iter(net))
if mode and mode.startswith("service:"):
    holder = svcs.get(mode.split(":", 1)[1], {})
    aliases = holder.get("networks", {}).get("default", {}).get("aliases", [])
    check(sorted(aliases) == workers, f"{mode} carries the aliases {workers}")
    check(all(svcs[n]["environment"]["NCCL_SOCKET_IFNAME"] == "lo" for n in workers),
          "shared namespace: NCCL bootstrap on lo")

if errors:
    print("\n".join("compose: " + e for e in errors)); sys.exit(1)
print(f"compose: OK ({len(svcs)} services)")
EOF
}

check_dockerfile() {
  python3 - "$DOCKERFILE" <<'EOF' > "$tmp/runs.txt"
import re, shlex, sys
lines, cur = [], ""
for line in open(sys.argv[1]):
    s = line.rstrip("\n")
    if not cur and (s.strip().startswith("#") or not s.strip()):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "; continue
    lines.append(cur + s); cur = ""
errors, stage_user, health = [], None, None
STEP = "/src/scripts/docker-build-steps.sh"
for l in lines:
    instr, _, rest = l.strip().partition(" ")
    instr = instr.upper()
    if instr == "FROM":
        stage_user = None
    elif instr in ("SHELL", "ONBUILD"):
        errors.append(f"{instr} is not allowed (it would change what RUN executes)")
    elif instr == "USER":
        stage_user = rest.strip()
    elif instr == "HEALTHCHECK":
        health = rest
    elif instr == "RUN":
        # Optional BuildKit flags (--mount=..., --network=...), then exactly the script, a step and a
        # variant: no shell operators, no second command, no exec form.
        m = re.fullmatch(r"(?:--\S+\s+)*" + re.escape(STEP) +
                         r" (bundle|deps|build|stage|runtime) (cuda|cpu|\$\{VARIANT\})\s*", rest.strip() + " ")
        if not m:
            errors.append(f"RUN must be exactly '{STEP} STEP VARIANT': {l}")
        else:
            print(m.group(1), m.group(2))
if stage_user in (None, "root", "0", "0:0"):
    errors.append("the final stage must switch to a non-root USER")
if not health or "ditserve-cli" not in health or "health" not in health:
    errors.append("HEALTHCHECK through ditserve-cli health (gRPC health service)")
if errors:
    print("\n".join("dockerfile: " + e for e in errors), file=sys.stderr); sys.exit(1)
EOF
  local n=0 step variant v
  while read -r step variant; do
    for v in cuda cpu; do
      [ "$variant" = '${VARIANT}' ] || [ "$variant" = "$v" ] || continue
      # bundle cuda resolves ~50 packages through apt: covered by `steps`; here only the syntax.
      [ "$step" = bundle ] && { "$repo/scripts/docker-build-steps.sh" --help >/dev/null; continue; }
      "$repo/scripts/docker-build-steps.sh" --dry-run "$step" "$v" > "$tmp/dry.log" 2>&1 \
        || { cat "$tmp/dry.log"; fail "Dockerfile step '$step $v' fails in scripts/docker-build-steps.sh"; }
    done
    n=$((n + 1))
  done < "$tmp/runs.txt"
  [ "$n" -ge 7 ] || fail "expected the bundle/deps/build/stage/runtime RUNs, found $n"
  for s in bundle deps build stage runtime; do
    grep -q "^$s " "$tmp/runs.txt" || fail "the Dockerfile never runs step $s"
  done
  echo "dockerfile: OK ($n RUN lines, all through scripts/docker-build-steps.sh)"
}

check_prometheus() {
  need promtool
  local file="$PROMETHEUS"
  promtool check config "$file"
  local port
  port=$(grep -o -- '--metrics-listen=[^ ]*' "$COMPOSE" | head -1 | sed 's/.*://')
  [ -n "$port" ] || fail "no --metrics-listen in deploy/docker-compose.yml"
  grep -Eq "targets: \[\"frontend:$port\"\]" "$file" || fail "prometheus.yml does not scrape frontend:$port"
  echo "prometheus: OK (frontend:$port)"
}

check_steps() {
  "$repo/scripts/docker-build-steps.sh" --dry-run all cpu
  "$repo/scripts/docker-build-steps.sh" --dry-run bundle cuda | tail -3
  "$repo/scripts/docker-build-steps.sh" --dry-run all cuda > /dev/null
  echo "steps: OK"
}

check_stage() {
  local build=${1:?stage needs the build dir}
  local prefix="$tmp/opt/ditserve"
  "$repo/scripts/docker-build-steps.sh" stage cpu --build-dir "$build" --prefix "$prefix"
  for b in ditserve-frontend ditserve-worker ditserve-cli ditserve-tool ditserve-spm-train; do
    [ -x "$prefix/bin/$b" ] || fail "stage did not install $b"
    if ldd "$prefix/bin/$b" | grep 'not found'; then fail "$b has unresolved libraries"; fi
  done
  [ -n "$(find "$prefix/models/tiny" -name '*.safetensors' -print -quit)" ] \
    || fail "no generated tiny model (safetensors) under models/tiny"
  local list="$prefix/share/runtime-packages.txt"
  grep -qx 'libgrpc++1.51' "$list" || fail "runtime-packages.txt lacks libgrpc++1.51"
  grep -q '^libtorch' "$list" || fail "runtime-packages.txt lacks LibTorch's runtime package"
  if grep -q -- '-dev$' "$list"; then fail "runtime-packages.txt names -dev packages"; fi
  "$repo/scripts/docker-build-steps.sh" --dry-run runtime cpu --prefix "$prefix" > "$tmp/rt.log" \
    || { cat "$tmp/rt.log"; fail "runtime packages lack apt candidates"; }
  echo "stage: OK ($(wc -l < "$list") runtime packages)"
}

# Runs CHECK on a copy of one file edited by a sed expression and requires it to fail.
expect_reject() {
  local what=$1 var=$2 src=$3 expr=$4 copy
  copy="$tmp/selftest-$(basename "$src")"
  sed -e "$expr" "$src" > "$copy"
  cmp -s "$src" "$copy" && fail "selftest: the edit '$expr' changed nothing in $src"
  if env "$var=$copy" "$0" "$what" > "$tmp/selftest.log" 2>&1; then
    cat "$tmp/selftest.log"; fail "selftest: '$what' accepted $src edited with '$expr'"
  fi
  echo "selftest: $what rejects: $expr"
}

check_selftest() {
  expect_reject dockerfile DEPLOY_DOCKERFILE "$DOCKERFILE" '$a RUN apt-get install -y curl'
  expect_reject dockerfile DEPLOY_DOCKERFILE "$DOCKERFILE" 's|docker-build-steps.sh build cpu|docker-build-steps.sh build cpu \&\& make|'
  expect_reject dockerfile DEPLOY_DOCKERFILE "$DOCKERFILE" 's|^USER .*|USER root|'
  expect_reject compose DEPLOY_COMPOSE "$COMPOSE" 's|^  worker0:|  worker0:\n    gpus: all|'
  expect_reject compose DEPLOY_COMPOSE "$COMPOSE" '1i name: ditserve'
  expect_reject compose DEPLOY_COMPOSE "$COMPOSE" 's|device_ids: \["0", "1", "2", "3"\]|device_ids: ["0"]|'
  expect_reject compose DEPLOY_COMPOSE "$COMPOSE" 's|capabilities: \[gpu\]|capabilities: gpu|'
  expect_reject compose DEPLOY_COMPOSE "$COMPOSE" 's|worker2:50062,|worker2:50099,|'
  expect_reject compose DEPLOY_COMPOSE "$COMPOSE" '/^  frontend:/,/^  prometheus:/s|stop_grace_period: 60s|stop_grace_period: 20s|'
  expect_reject prometheus DEPLOY_PROMETHEUS "$PROMETHEUS" 's|frontend:9464|frontend:9999|'
  expect_reject prometheus DEPLOY_PROMETHEUS "$PROMETHEUS" 's|scrape_interval: 15s|scrape_interval: often|'
  echo "selftest: OK"
}

case "${1:-}" in
  selftest) check_selftest ;;
  compose) check_compose ;;
  dockerfile) check_dockerfile ;;
  prometheus) check_prometheus ;;
  steps) check_steps ;;
  stage) shift; check_stage "$@" ;;
  *) echo "usage: deploy_checks.sh compose|dockerfile|prometheus|steps|stage BUILD_DIR" >&2; exit 2 ;;
esac
