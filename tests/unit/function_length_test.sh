#!/usr/bin/env bash
# scripts/check_function_length.py: no production function is over 80 lines (HACKING.md), and the
# check does measure (a synthetic tree: an 81-line function fails naming it; an 80-line one, a
# constructor with brace-initialised members and a long string with braces in it do not).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
check="${src}/scripts/check_function_length.py"
python3 "${check}" --root "${src}"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
mkdir -p "${tmp}/server"
{
  echo 'namespace ditserve {'
  echo 'int Long(int x) {'
  for i in $(seq 1 79); do echo "  x += $i;  // {"; done
  echo '}'
  echo 'struct S {'
  echo '  S() : a_{1}, b_{2} {'
  for i in $(seq 1 78); do echo "    a_ += $i;"; done
  echo '  }'
  echo '  int a_, b_;'
  echo '};'
  echo 'const char* kText = "{ { {";'
  echo 'int Short() { auto f = [] { return 1; }; return f(); }'
  echo '}  // namespace ditserve'
} > "${tmp}/server/t.cc"
if out="$(python3 "${check}" --root "${tmp}" 2>&1)"; then
  echo "FAIL: the 81-line function was not reported"; echo "${out}"; exit 1
fi
grep -qE "^ +81 server/t.cc:2 Long$" <<< "${out}" || { echo "FAIL: unexpected report:"; echo "${out}"; exit 1; }
grep -qF "3 functions, 1 over 80 lines" <<< "${out}" || { echo "FAIL: miscounted:"; echo "${out}"; exit 1; }
echo "function length: none over 80 lines in the repository, and the synthetic one was caught"
