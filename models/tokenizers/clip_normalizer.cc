#include "models/tokenizers/clip_normalizer.h"

namespace ditserve::tokenizers {
namespace {

bool IsAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool IsAsciiWhitespace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// ASCII text is already NFC and lower-cases byte by byte: the common case, without ICU.
std::string NormalizeAscii(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_space = false;
  for (char c : text) {
    if (IsAsciiWhitespace(c)) {
      if (!in_space) out.push_back(' ');
      in_space = true;
      continue;
    }
    in_space = false;
    out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  return out;
}

}  // namespace

std::string NormalizeClipText(absl::string_view text) {
  if (IsAscii(text)) return NormalizeAscii(text);
  // NFC (invalid UTF-8 becomes U+FFFD on the way through ICU), whitespace runs to one ' ', then
  // the context-free lower-case mapping.
  const std::string composed = NfcNormalize(text);
  std::string collapsed;
  collapsed.reserve(composed.size());
  bool in_space = false;
  for (size_t pos = 0; pos < composed.size();) {
    int32_t c;
    const size_t len = DecodeUtf8(composed, pos, &c);
    if (IsUnicodeWhitespace(c)) {
      if (!in_space) collapsed.push_back(' ');
      in_space = true;
    } else {
      in_space = false;
      collapsed.append(composed, pos, len);
    }
    pos += len;
  }
  return LowercaseUnicode(collapsed);
}

}  // namespace ditserve::tokenizers
