// The text normaliser of the CLIP tokenizer (tokenizer.json "normalizer" of CLIPTokenizerFast):
// Unicode NFC, every run of whitespace replaced by one ' ', then lower-casing character by character
// with the full (possibly multi-character) Unicode lower-case mapping and no context (so 'İ' becomes
// "i̇" and a lone 'Σ' becomes 'σ', as Rust's char::to_lowercase does). Whitespace is Unicode
// White_Space, the set that Oniguruma's \s matches in the reference implementation. Uses ICU.
//
// Invalid UTF-8 in the input is replaced by U+FFFD (the reference only ever sees valid strings).
// Stateless; safe to call from any thread.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

std::string NormalizeClipText(absl::string_view text);

// Unicode White_Space (U+0009..U+000D, U+0020, U+0085, and the Zs/Zl/Zp categories).
bool IsUnicodeWhitespace(int32_t code_point);

}  // namespace ditserve::tokenizers
