#!/usr/bin/env bash
# ctest entry for the Kubernetes manifests (tests/integration/CMakeLists.txt: deploy_k8s,
# deploy_k8s_selftest). Runs tests/deploy/k8s-validate/validate.js; exits 77 (ctest SKIP_RETURN_CODE)
# with the reason when Node.js or that folder's node_modules (`npm ci`, scripts/setup.sh) is missing.
#   k8s_checks.sh check      deploy/k8s against the schemas and itself
#   k8s_checks.sh selftest   broken copies of deploy/k8s must fail
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir="$here/k8s-validate"
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed (scripts/setup.sh installs npm, which brings it)"; exit 77
fi
if [ ! -d "$dir/node_modules/kubernetes-models" ]; then
  echo "SKIP: tests/deploy/k8s-validate/node_modules is absent (run npm ci there; scripts/setup.sh does)"; exit 77
fi
case "${1:-}" in
  check) exec node "$dir/validate.js" ;;
  selftest) exec node "$dir/validate.js" --selftest ;;
  *) echo "usage: k8s_checks.sh check|selftest" >&2; exit 2 ;;
esac
