#!/usr/bin/env bash
# The layer check (scripts/check_layers.py): the repository has no upward include, and the check
# does catch one (a synthetic tree with three kinds of violation must fail, naming each).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
check="${src}/scripts/check_layers.py"
python3 "${check}" "${src}"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
mkdir -p "${tmp}/models/common" "${tmp}/models/flux1" "${tmp}/server" "${tmp}/pipeline" "${tmp}/common"
printf '#include "models/flux1/flux1_transformer.h"\n' > "${tmp}/models/common/attention.h"
printf '#include "models/transformer.h"\n' > "${tmp}/models/flux1/flux1_transformer.h"
printf '#include "pipeline/pipeline.h"\n#include "models/lora/lora_files.h"\n' > "${tmp}/server/dispatcher.cc"
printf '#include "worker/engine.h"\n' > "${tmp}/pipeline/job.h"
printf '#include "absl/status/status.h"\n#include "common/flags.h"\n' > "${tmp}/common/flags.cc"
if out="$(python3 "${check}" "${tmp}")"; then
  echo "FAIL: the synthetic upward includes were not reported:"; echo "${out}"; exit 1
fi
for want in "models/common/attention.h:1: models/common/ may not include models/flux1/flux1_transformer.h" \
            "server/dispatcher.cc:1: server/ may not include pipeline/pipeline.h" \
            "pipeline/job.h:1: pipeline/ may not include worker/engine.h" \
            "check_layers: 5 files, 3 upward includes"; do
  grep -qF "${want}" <<< "${out}" || { echo "FAIL: missing '${want}' in:"; echo "${out}"; exit 1; }
done
echo "layer check: the repository is clean and the synthetic violations were caught"
