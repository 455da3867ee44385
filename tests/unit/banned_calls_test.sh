#!/usr/bin/env bash
# scripts/check_banned_calls.py: the repository makes none of the banned calls, and the check does
# catch one (a synthetic file with a use in code must fail, naming it; a use in a comment must not).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
check="${src}/scripts/check_banned_calls.py"
python3 "${check}" "${src}"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
mkdir -p "${tmp}/tests"
printf '// not fs::remove_all(dir): see remove_tree.h\nvoid F() { std::filesystem::remove_all(dir); }\n' \
  > "${tmp}/tests/t.cc"
if out="$(python3 "${check}" "${tmp}")"; then
  echo "FAIL: the synthetic remove_all was not reported"; exit 1
fi
grep -qF "tests/t.cc:2: std::filesystem::remove_all crashes" <<< "${out}" ||
  { echo "FAIL: unexpected report:"; echo "${out}"; exit 1; }
if grep -qF "tests/t.cc:1:" <<< "${out}"; then echo "FAIL: a comment was reported"; exit 1; fi
echo "banned calls: none in the repository, and the synthetic one was caught"
