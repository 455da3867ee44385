#include "tools/tiny_model/file_util.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ditserve::tiny_model {

absl::Status WriteFile(const std::string& path, const std::string& content) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  const size_t written = std::fwrite(content.data(), 1, content.size(), f);
  const bool write_ok = written == content.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !write_ok) {
    return absl::InternalError(
        absl::StrCat(path, ": write failed: ", std::strerror(write_ok ? errno : write_errno)));
  }
  return absl::OkStatus();
}

std::string ConfigJsonText(const nlohmann::json& config) {
  return config.dump(2, ' ', /*ensure_ascii=*/false) + "\n";
}

namespace {

// nftw's callback has no user argument: the first failure is kept here, per thread.
thread_local std::string remove_failure;

int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  if (rc != 0 && errno != ENOENT) {
    remove_failure = absl::StrCat(path, ": cannot remove: ", std::strerror(errno));
    return 1;
  }
  return 0;
}

}  // namespace

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  remove_failure.clear();
  // FTW_DEPTH: a folder's entries before the folder; FTW_PHYS: links are not followed.
  if (::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    return absl::InternalError(remove_failure.empty()
                                   ? absl::StrCat(path, ": cannot walk: ", std::strerror(errno))
                                   : remove_failure);
  }
  return absl::OkStatus();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace ditserve::tiny_model
