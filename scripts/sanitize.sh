#!/usr/bin/env bash
# The test suites under sanitizers, on the CPU variant (needs only scripts/setup.sh's packages).
#
#   scripts/sanitize.sh asan [--jobs N] [--bundle DIR] [--build-only|--test-only] [-- CTEST_ARGS...]
#       builds everything with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan (clang,
#       as the normal CPU build, -O1 with line tables, the shared LibTorch PCH on) and runs the
#       unit, integration and e2e suites there (ctest -L, every test, each TIMEOUT scaled by
#       DITSERVE_TEST_TIMEOUT_SCALE; GPU tests skip themselves). LibTorch, gRPC and Gloo are
#       Debian's uninstrumented libraries: container-overflow checks are off (they need every
#       library instrumented) and the leak reports of those libraries' one-time allocations are
#       suppressed by tests/sanitizers/lsan.supp, whose entries each name the library they excuse.
#       Every process's reports go to build-asan/sanitizer-reports/ (listed at the end).
#       --bundle DIR builds against a GPU host's PyTorch and the scripts/gpu-bundle.sh folder
#       instead (through scripts/gpu-build.sh --cpu, g++), to use that host's cores; --build-only /
#       --test-only split the two halves (one call each). The GPU tests under ASan (the CUDA
#       variant) are scripts/gpu-asan.sh's.
#   scripts/sanitize.sh tsan [--jobs N]
#       builds these targets with ThreadSanitizer into build-tsan (clang) and runs them: the
#       worker's Engine around real tiny jobs (engine_test: its status, cancel and progress
#       threads; the one LibTorch target, ~13 min to build at -j2), its engine thread and
#       progress queue, the frontend's queue,
#       dispatcher, worker group (its ranks' threads, group jobs), RPC edge and HTTP API against
#       fake workers, the metrics, the CLI, the tokenizers' BPE core, the subprocess and host:port
#       helpers.
#
# Exit status 0 when every test passed with no sanitizer report. The log goes to
# build-{asan,tsan}/sanitize.log; the last run's summary is kept in bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
mode="${1:-}"; shift || true
jobs=$(nproc)
bundle="" phase=all
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs="$2"; shift ;;
    --bundle) bundle="$2"; shift ;;
    --build-only) phase=build ;;
    --test-only) phase=test ;;
    --) shift; ctest_args=("$@"); break ;;
    *) echo "sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
supp="$(pwd)/tests/sanitizers"
case "$mode" in
  asan)
    dir=build-asan
    if [ "$phase" != test ]; then
      if [ -n "$bundle" ]; then
        scripts/gpu-build.sh --bundle "$bundle" --build-dir "$dir" --cpu --configure-only -- \
          -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDITSERVE_SANITIZE=address -DDITSERVE_TORCH_PCH=OFF \
          -DDITSERVE_TESTS=ON > /dev/null || exit 1
      else
        # clang, as the normal CPU build (HACKING.md): the shared LibTorch PCH stays on (clang's
        # is 125 MB and loaded lazily; it is compiled with the same -fsanitize flags as every
        # translation unit that reuses it). -O1 and line tables only: enough for symbolized
        # reports, and a LibTorch translation unit compiles about twice as fast as with -O2 -g.
        cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
          -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
          "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
          "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
          -DDITSERVE_SANITIZE=address -DDITSERVE_TORCH_PCH=ON > /dev/null || exit 1
      fi
      cmake --build "$dir" -j "$jobs" > "$dir/build.log" 2>&1 || { tail -30 "$dir/build.log"; exit 1; }
      echo "asan: built $dir"
      [ "$phase" = build ] && exit 0
    fi
    # shellcheck disable=SC1091
    [ -f "$dir/ditserve-env.sh" ] && . "$dir/ditserve-env.sh"
    # Every report of every process (the tests, and the frontends, workers and CLIs they start,
    # whose stderr a test may keep to itself) is written to its own file under
    # $dir/sanitizer-reports/report.PID (clang has one runtime for ASan, LSan and UBSan), listed
    # at the end.
    reports="$(pwd)/$dir/sanitizer-reports"
    rm -rf "$reports" && mkdir -p "$reports"
    # shellcheck source=tests/sanitizers/asan_env.sh
    . tests/sanitizers/asan_env.sh
    # A CUDA PyTorch (--bundle) initialises CUDA.
    asan_env "$reports" "$([ -n "$bundle" ] && echo cuda)"
    # Each test's TIMEOUT is already scaled for the sanitizer (DITSERVE_TEST_TIMEOUT_SCALE).
    (cd "$dir" && ctest -L 'unit|integration|e2e' --timeout 1800 -j "$jobs" --output-on-failure \
      "${ctest_args[@]}") 2>&1 | tee "$dir/sanitize.log"
    rc=${PIPESTATUS[0]}
    n=$(find "$reports" -type f | wc -l)
    echo "asan: $n sanitizer report file(s) in $reports" | tee -a "$dir/sanitize.log"
    for f in "$reports"/*; do
      [ -f "$f" ] || continue
      { echo "== $f"; head -60 "$f"; } | tee -a "$dir/sanitize.log"
    done
    [ "$n" -gt 0 ] && rc=1
    ;;
  tsan)
    dir=build-tsan
    # engine_thread_test and progress_queue_test: the worker's engine thread and progress queue
    # (torch-free); frontend_failure_test and http_api_test: the worker group, its ranks' threads
    # and group jobs against in-process fake workers; image_inputs_frontend_test: the whole
    # frontend in --workers mode; image_encoders_test: the PNG encoder's strip threads.
    targets=(common_test frontend_deadline_test frontend_failure_test host_port_test metrics_unit_test
             server_unit_test tokenizer_bpe_test metrics_http_test subprocess_test cli_clients_test
             http_api_test openai_images_test progress_queue_test engine_thread_test
             image_inputs_frontend_test engine_test image_encoders_test)
    # clang, as the normal CPU build; the LibTorch PCH off (engine_test's model code compiles
    # without it, once).
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" \
      -DDITSERVE_SANITIZE=thread -DDITSERVE_TORCH_PCH=OFF > /dev/null || exit 1
    cmake --build "$dir" -j "$jobs" --target "${targets[@]}" ditserve-cli > "$dir/build.log" 2>&1 ||
      { tail -30 "$dir/build.log"; exit 1; }
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
    rc=0
    : > "$dir/sanitize.log"
    for t in "${targets[@]}"; do
      bin=$(pwd)/$(find "$dir/tests" -type f -name "$t" -perm -u+x | head -1)
      if (cd "$dir" && "$bin") >> "$dir/sanitize.log" 2>&1; then echo "tsan: $t passed"
      else echo "tsan: $t FAILED"; rc=1; fi
    done
    grep -A30 "WARNING: ThreadSanitizer" "$dir/sanitize.log" | head -80
    ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [--jobs N] [-- CTEST_ARGS...]" >&2; exit 2 ;;
esac
exit "$rc"
