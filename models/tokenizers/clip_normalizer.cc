#include "models/tokenizers/clip_normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

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

// Full lower-case mapping of one code point, with no surrounding context.
void AppendLower(UChar32 c, icu::UnicodeString* out) {
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, c);
  UChar dest[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dest, 8, src, src_len, /*locale=*/"", &status);
  if (U_FAILURE(status) || n > 8) {
    out->append(u_tolower(c));  // simple mapping; cannot happen for any Unicode 15 code point
    return;
  }
  out->append(dest, n);
}

}  // namespace

bool IsUnicodeWhitespace(int32_t code_point) { return u_isUWhiteSpace(code_point) != 0; }

std::string NormalizeClipText(absl::string_view text) {
  if (IsAscii(text)) return NormalizeAscii(text);

  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  const icu::UnicodeString source =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  icu::UnicodeString composed;
  if (U_SUCCESS(status)) composed = nfc->normalize(source, status);
  if (U_FAILURE(status)) composed = source;  // ICU data missing: cannot happen with libicu72

  icu::UnicodeString lowered;
  bool in_space = false;
  for (int32_t i = 0; i < composed.length();) {
    const UChar32 c = composed.char32At(i);
    i += U16_LENGTH(c);
    if (u_isUWhiteSpace(c)) {
      if (!in_space) lowered.append(static_cast<UChar>(' '));
      in_space = true;
      continue;
    }
    in_space = false;
    AppendLower(c, &lowered);
  }
  std::string out;
  lowered.toUTF8String(out);
  return out;
}

}  // namespace ditserve::tokenizers
