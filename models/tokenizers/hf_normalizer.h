// The "normalizer" of a Hugging Face tokenizer.json, the kinds that the supported tokenizers use:
// a sequence of NFC, Lowercase (Rust's context-free char::to_lowercase) and Replace (every match
// of a literal or an Oniguruma-syntax regex replaced by a fixed string). An empty sequence is the
// identity (tokenizer.json "normalizer": null). Torch-free.
//
// Thread-safety: immutable after construction; Normalize() may run concurrently. Movable.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/tokenizers/pcre2_regex.h"

namespace ditserve::tokenizers {

class HfNormalizer {
 public:
  HfNormalizer() = default;
  HfNormalizer(HfNormalizer&&) noexcept = default;
  HfNormalizer& operator=(HfNormalizer&&) noexcept = default;

  void AddNfc();
  void AddLowercase();
  // Replace: every match of `pattern` (Pcre2Regex::CompileLiteral of a {"String": ...} pattern, or
  // Compile of a {"Regex": ...} one) becomes `content`. As in the reference, empty text is left
  // alone and empty matches insert `content`.
  void AddReplace(Pcre2Regex pattern, std::string content);

  bool empty() const { return steps_.empty(); }

  // `text` (valid UTF-8) through every step in order.
  absl::StatusOr<std::string> Normalize(absl::string_view text) const;

 private:
  enum class Kind { kNfc, kLowercase, kReplace };
  struct Step {
    Kind kind;
    std::optional<Pcre2Regex> pattern;  // kReplace only
    std::string content;                // kReplace
  };
  std::vector<Step> steps_;
};

}  // namespace ditserve::tokenizers
