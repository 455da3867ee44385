// The private folder a file-writing fuzz target (config, tokenizer) writes its inputs into.
// $DITSERVE_FUZZ_WORKDIR when set: run_fuzz.sh's CI mode gives a fixed name, so the paths the
// readers build and compare are the same in every run (a random mkdtemp name reached the mutator
// through trace-cmp and made two runs of one seed differ); it is emptied and created here, and
// must not be shared by two running fuzzers. Otherwise a fresh mkdtemp folder under the temporary
// directory. Aborts when the folder cannot be made.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace ditserve_fuzz {

inline std::string MakeFuzzWorkdir(const char* name) {
  namespace fs = std::filesystem;
  if (const char* fixed = std::getenv("DITSERVE_FUZZ_WORKDIR"); fixed != nullptr && *fixed) {
    std::error_code ec;
    fs::remove_all(fixed, ec);
    fs::create_directories(fixed, ec);
    if (ec) {
      std::fprintf(stderr, "cannot create %s: %s\n", fixed, ec.message().c_str());
      std::abort();
    }
    return fixed;
  }
  std::string tmpl = (fs::temp_directory_path() / (std::string(name) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  return tmpl;
}

}  // namespace ditserve_fuzz
