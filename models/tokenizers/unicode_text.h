// Unicode helpers shared by the tokenizers: UTF-8 validation, NFC, the context-free full lower-case
// mapping, and the character classes that the reference libraries' regular expressions use. Uses
// ICU. Torch-free; stateless functions, safe to call from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool IsValidUtf8(absl::string_view text);

// Decodes the code point starting at `text[pos]` of valid UTF-8 and returns its byte length.
size_t DecodeUtf8(absl::string_view text, size_t pos, int32_t* code_point);

// Unicode NFC of valid UTF-8 text (ASCII text is returned unchanged without calling ICU).
std::string NfcNormalize(absl::string_view text);

// Every character replaced by its full lower-case mapping, without context (so 'İ' becomes "i̇"
// and a final 'Σ' becomes 'σ'), as Rust's char::to_lowercase does. Valid UTF-8 in and out.
std::string LowercaseUnicode(absl::string_view text);

// Unicode White_Space (U+0009..U+000D, U+0020, U+0085, and the Zs/Zl/Zp categories): Rust's
// char::is_whitespace, the regex crate's and Oniguruma's \s.
bool IsUnicodeWhitespace(int32_t code_point);

// The Rust regex crate's Unicode \w: Alphabetic, marks (M), decimal numbers (Nd), connector
// punctuation (Pc) and Join_Control.
bool IsRegexWordChar(int32_t code_point);

}  // namespace ditserve::tokenizers
