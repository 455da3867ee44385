// Which files a model folder may reach through symbolic links. Torch-free.
//
// A model folder comes from elsewhere (a download, a copy, a tarball), so a symbolic link inside it
// must not make the server read a file outside it (a key, /proc/self/..., another model): a link
// named "diffusion_pytorch_model.safetensors" or "tokenizer.json" would otherwise make the loader
// read, and its error messages quote, whatever the link points at.
//
// The rule: every symbolic link anywhere under the model folder (component folders, weight files,
// tokenizer and config files; links to links are followed to the end) must resolve inside the
// folder's trust root:
//   - the model folder the user named (--model DIR), after resolving DIR itself (DIR may be a link);
//   - except inside a Hugging Face hub cache snapshot, <cache>/models--ORG--NAME/snapshots/REVISION,
//     whose files are links into ../../blobs/: when the folder is a snapshot or lies inside one
//     (an ancestor's parent named "snapshots" beside a "blobs" folder), the trust root is the
//     repository's cache folder <cache>/models--ORG--NAME, so links into the same repository's
//     blobs/ are allowed and links anywhere else are not.
// Links that dangle inside the trust root are left to the reader (which then reports the missing
// file). The check runs when a pipeline root or a component folder is opened; it does not defend
// against files replaced while the server runs (whoever can do that can change the weights too).
//
// Errors are FAILED_PRECONDITION naming the link, its target and the trust root. Stateless; safe to
// call from any thread.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ditserve::sharding {

// The trust root of the model folder `model_dir` (see above), as a canonical absolute path.
// NOT_FOUND when `model_dir` does not exist.
absl::StatusOr<std::string> ModelTrustRoot(const std::string& model_dir);

// Walks `dir` (a folder inside `trust_root`; a canonical path) and refuses the first symbolic link
// whose target resolves outside `trust_root`, or `dir` itself when it resolves outside. Folders that
// allowed links lead to are walked too (once each). At most kMaxModelTreeEntries entries are looked
// at: a larger tree is refused as not being a model folder.
absl::Status CheckModelTreeLinks(const std::string& dir, const std::string& trust_root);

// CheckModelTreeLinks for the model folder `model_dir` itself: walks it against its trust root.
absl::Status CheckModelFolderLinks(const std::string& model_dir);

// The same for a component folder: its model folder is its parent when the parent is a pipeline
// root (holds model_index.json), else the component folder itself (a transformer folder served
// alone). Only the component folder is walked.
absl::Status CheckComponentFolderLinks(const std::string& component_dir);

inline constexpr size_t kMaxModelTreeEntries = 100000;

}  // namespace ditserve::sharding
