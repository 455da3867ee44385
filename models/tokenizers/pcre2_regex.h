// Regular expressions of Hugging Face tokenizer files, run with PCRE2 (Debian libpcre2-dev, 8-bit,
// UTF mode + Unicode properties, JIT where available). Torch-free.
//
// Why PCRE2 and not RE2 (which the CLIP tokenizer uses): the `tokenizers` library compiles its
// Split / Replace patterns with Oniguruma, and the patterns that FLUX.2 (Mistral) and Qwen ship
// need what RE2 cannot do: negative look-ahead (`\s+(?!\S)`), possessive / atomic forms in other files,
// Unicode classes inside negated sets (`[^\r\n\p{L}\p{N}]`) and scoped case-insensitivity.
//
// Oniguruma syntax is translated to PCRE2's before compiling, so that the classes mean what they
// mean in the reference: \s is exactly 0009-000D, 0085 and Zs/Zl/Zp (PCRE2's own \s also matches
// U+180E), \w is L|M|N|Pc, \h is a hex digit, \uHHHH a code point, ^ and $ are line anchors, and
// the option letter m of (?m: ...) is dot-matches-newline. Oniguruma constructs that PCRE2 lacks
// (nested character sets, `&&` class intersection, options other than i, m, x) are refused with a
// message naming them. Known residue: a negated shorthand inside a class ([\S], [\W]) keeps PCRE2's
// meaning (differs from Oniguruma on U+180E / marks only).
//
// FindAll() iterates like the onig crate's find_iter, which `tokenizers` uses: each search starts
// where the previous match ended; an empty match right at the end of the previous match is skipped
// by advancing one character.
//
// Ownership: owns the compiled pattern. Thread-safety: immutable after Compile(); FindAll() may run
// concurrently (match data is per call). Movable, not copyable.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

class Pcre2Regex {
 public:
  // `pattern` in Oniguruma syntax. INVALID_ARGUMENT with PCRE2's message (and offset) or the name
  // of the unsupported construct.
  static absl::StatusOr<Pcre2Regex> Compile(absl::string_view pattern);
  // A pattern that matches `literal` exactly (a tokenizer.json {"String": ...} pattern).
  static absl::StatusOr<Pcre2Regex> CompileLiteral(absl::string_view literal);

  Pcre2Regex(Pcre2Regex&&) noexcept;
  Pcre2Regex& operator=(Pcre2Regex&&) noexcept;
  ~Pcre2Regex();

  // Byte ranges [begin, end) of the matches in `text` (valid UTF-8: callers check), appended to
  // `matches` left to right. RESOURCE_EXHAUSTED if PCRE2 hits a match limit.
  absl::Status FindAll(absl::string_view text,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  // The pattern as given (Oniguruma syntax).
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  Pcre2Regex();

  std::string pattern_;
  std::string pcre2_pattern_;  // as compiled (PCRE2 syntax); named in compile errors
  std::unique_ptr<Code> code_;
};

// The PCRE2 spelling of an Oniguruma pattern (see the header comment); exposed for tests.
absl::StatusOr<std::string> TranslateOnigurumaPattern(absl::string_view pattern);

}  // namespace ditserve::tokenizers
