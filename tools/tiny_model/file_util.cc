#include "tools/tiny_model/file_util.h"

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

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace ditserve::tiny_model
