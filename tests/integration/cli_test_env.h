// Paths and small file helpers shared by the client tests (cli_*_test.cc).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ditserve::testing {

inline std::string CliBinary() { return DITSERVE_BINARY_DIR "/cli/ditserve-cli"; }
inline std::string PythonStubsDir() { return DITSERVE_BINARY_DIR "/python"; }
inline std::string PythonClient() {
  return DITSERVE_SOURCE_DIR "/deploy/clients/python/ditserve_client.py";
}
inline std::string NodeClientDir() { return DITSERVE_SOURCE_DIR "/deploy/clients/node"; }
// Debian's interpreter: the one python3-grpcio is installed for.
inline constexpr char kDebianPython[] = "/usr/bin/python3";

// A fresh directory under the test temp dir (left behind for inspection on failure).
inline std::string MakeTempDir() {
  std::string tmpl = ::testing::TempDir() + "ditserve-cli-XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  return dir != nullptr ? std::string(dir) : std::string();
}

inline bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace ditserve::testing
