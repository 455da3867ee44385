#include "common/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ditserve {

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

}  // namespace ditserve
