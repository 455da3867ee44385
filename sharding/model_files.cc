#include "sharding/model_files.h"

#include <filesystem>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ditserve::sharding {
namespace fs = std::filesystem;
namespace {

// `p` is `root` or below it (both canonical / normalised absolute paths).
bool Inside(const fs::path& p, const fs::path& root) {
  auto r = root.begin();
  auto q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (r->empty() && std::next(r) == root.end()) break;  // trailing separator of `root`
    if (q == p.end() || *q != *r) return false;
  }
  return true;
}

// Where the link at `link` finally points, followed through every link on the way; the missing
// tail of a dangling target is kept as written. Errors (a link loop) leave `out` empty.
fs::path ResolveLink(const fs::path& link, std::error_code& ec) {
  fs::path target = fs::read_symlink(link, ec);
  if (ec) return {};
  if (target.is_relative()) target = link.parent_path() / target;
  return fs::weakly_canonical(target, ec);
}

absl::Status Escapes(const fs::path& link, const std::string& target, const fs::path& root) {
  return absl::FailedPreconditionError(absl::StrCat(
      link.string(), ": symbolic link to '", target, "', which is outside the model folder ",
      root.string(), "; links may only point inside the folder (or, in a Hugging Face cache "
      "snapshot, into the same repository's blobs/)"));
}

// The folder a model folder's parts are found in: the canonical path of `model_dir` with no
// trailing separator.
absl::StatusOr<fs::path> CanonicalDir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::canonical(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": cannot resolve: ", ec.message()));
  return p;
}

// `dir` as written, made absolute and normalised, without a trailing separator (not resolved).
fs::path LexicalDir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec).lexically_normal();
  if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
  return p;
}

}  // namespace

absl::StatusOr<std::string> ModelTrustRoot(const std::string& model_dir) {
  absl::StatusOr<fs::path> dir = CanonicalDir(model_dir);
  if (!dir.ok()) return dir.status();
  // The folder itself or one of its ancestors may be the snapshot (a component folder of a
  // snapshot is opened alone when the repository has no model_index.json).
  for (fs::path p = *dir; p.has_relative_path(); p = p.parent_path()) {
    const fs::path parent = p.parent_path();
    std::error_code ec;
    if (parent.filename() == "snapshots" && fs::is_directory(parent.parent_path() / "blobs", ec)) {
      return parent.parent_path().string();  // <cache>/models--ORG--NAME
    }
  }
  return dir->string();
}

absl::Status CheckModelTreeLinks(const std::string& dir, const std::string& trust_root) {
  const fs::path root(trust_root);
  std::error_code ec;
  const fs::path start = fs::weakly_canonical(dir, ec);
  if (ec || !Inside(start, root)) {
    return Escapes(LexicalDir(dir), ec ? std::string("(unresolvable)") : start.string(), root);
  }
  std::vector<fs::path> pending = {start};
  std::set<fs::path> walked = {start};
  size_t entries = 0;
  while (!pending.empty()) {
    const fs::path folder = pending.back();
    pending.pop_back();
    fs::directory_iterator it(folder, ec);
    if (ec) continue;  // unreadable: the reader reports it if it needs the folder
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (++entries > kMaxModelTreeEntries) {
        return absl::FailedPreconditionError(
            absl::StrCat(root.string(), ": more than ", kMaxModelTreeEntries,
                         " files and folders; not a model folder"));
      }
      const fs::path& path = it->path();
      std::error_code sec;
      const fs::file_status st = it->symlink_status(sec);
      if (sec) continue;
      fs::path real = path;
      if (fs::is_symlink(st)) {
        std::error_code lec;
        real = ResolveLink(path, lec);
        if (lec) return Escapes(path, absl::StrCat("(unresolvable: ", lec.message(), ")"), root);
        if (!Inside(real, root)) return Escapes(path, real.string(), root);
        if (!fs::is_directory(real, lec)) continue;  // a file, or dangling inside the root
      } else if (!fs::is_directory(st)) {
        continue;
      }
      if (walked.insert(real).second) pending.push_back(real);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckModelFolderLinks(const std::string& model_dir) {
  absl::StatusOr<std::string> root = ModelTrustRoot(model_dir);
  if (!root.ok()) return root.status();
  return CheckModelTreeLinks(model_dir, *root);
}

absl::Status CheckComponentFolderLinks(const std::string& component_dir) {
  const fs::path dir = LexicalDir(component_dir);
  const fs::path parent = dir.parent_path();
  std::error_code ec;
  const bool in_pipeline = fs::is_regular_file(parent / "model_index.json", ec);
  absl::StatusOr<std::string> root = ModelTrustRoot(in_pipeline ? parent.string() : dir.string());
  if (!root.ok()) return root.status();
  return CheckModelTreeLinks(dir.string(), *root);
}

}  // namespace ditserve::sharding
