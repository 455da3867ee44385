// ditserve-test-qwen-edit-folder DIR [SEED]: writes the tiny random-weight Qwen-Image-Edit-2509
// folder of tests/support/qwen_edit_tiny_folder.h (WriteQwenEditTinyFolder; SEED defaults to 11,
// qwen_edit_e2e_test's) into DIR, for the scripts that serve it (tests/e2e/http_api_e2e.sh
// qwen_edits). An existing DIR is replaced. Reads the committed tests/fixtures/qwenimage-tiny/
// (FixturesDir(): $DITSERVE_FIXTURES_DIR, else the build's fixtures folder).
// Exit codes: 0 written (DIR printed), 1 failed (the error on stderr), 2 bad arguments.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "tests/support/qwen_edit_tiny_folder.h"

int main(int argc, char** argv) {
  const char* usage = "usage: ditserve-test-qwen-edit-folder DIR [SEED]";
  if (argc < 2 || argc > 3 || std::string(argv[1]).empty()) {
    std::cerr << usage << "\n";
    return 2;
  }
  uint64_t seed = 11;
  if (argc == 3 && !absl::SimpleAtoi(argv[2], &seed)) {
    std::cerr << "SEED must be a non-negative integer, got '" << argv[2] << "'\n" << usage << "\n";
    return 2;
  }
  absl::StatusOr<std::string> written = ditserve::testing::WriteQwenEditTinyFolder(argv[1], seed);
  if (!written.ok()) {
    std::cerr << "ditserve-test-qwen-edit-folder: " << written.status() << "\n";
    return 1;
  }
  std::cout << *written << "\n";
  return 0;
}
