# Sourced by scripts/sanitize.sh (asan) and scripts/gpu-asan.sh: the ASan / LSan / UBSan options of
# every process a sanitized test run starts.
#   asan_env REPORTS_DIR [cuda]
# Every process's reports go to REPORTS_DIR/report.PID (one runtime for ASan, LSan and UBSan);
# container-overflow checks are off (they need every library instrumented); the suppression files
# are this folder's. `cuda`: a process that initialises CUDA (a CUDA PyTorch) needs ASan's shadow
# gap unprotected.
asan_env() {
  local reports="$1" supp
  supp="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  export ASAN_OPTIONS="detect_leaks=1:detect_container_overflow=0:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0:log_path=$reports/report"
  [ "${2:-}" = cuda ] && ASAN_OPTIONS="$ASAN_OPTIONS:protect_shadow_gap=0"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp:log_path=$reports/report"
}
