// The text normaliser of the CLIP tokenizer (tokenizer.json "normalizer" of CLIPTokenizerFast):
// Unicode NFC, every run of whitespace replaced by one ' ', then lower-casing character by character
// with the full (possibly multi-character) Unicode lower-case mapping and no context (so 'İ' becomes
// "i̇" and a lone 'Σ' becomes 'σ', as Rust's char::to_lowercase does). Whitespace is Unicode
// White_Space, the set that Oniguruma's \s matches in the reference implementation. Built from
// unicode_text.h (ICU).
//
// Invalid UTF-8 in the input is replaced by U+FFFD (the reference only ever sees valid strings).
// Stateless; safe to call from any thread.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "models/tokenizers/unicode_text.h"  // IsUnicodeWhitespace, used with this normaliser

namespace ditserve::tokenizers {

std::string NormalizeClipText(absl::string_view text);

}  // namespace ditserve::tokenizers
