#include "models/tokenizers/unicode_text.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

namespace ditserve::tokenizers {
namespace {

bool IsAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
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

icu::UnicodeString FromUtf8(absl::string_view text) {
  return icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U8_NEXT(s, i, length, c);  // negative for ill-formed sequences (incl. surrogates, overlongs)
    if (c < 0) return false;
  }
  return true;
}

size_t DecodeUtf8(absl::string_view text, size_t pos, int32_t* code_point) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  int32_t i = static_cast<int32_t>(pos);
  UChar32 c;
  U8_NEXT(s, i, static_cast<int32_t>(text.size()), c);
  *code_point = c < 0 ? 0xFFFD : c;
  return static_cast<size_t>(i) - pos;
}

std::string NfcNormalize(absl::string_view text) {
  if (IsAscii(text)) return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  const icu::UnicodeString source = FromUtf8(text);
  icu::UnicodeString composed;
  if (U_SUCCESS(status)) composed = nfc->normalize(source, status);
  if (U_FAILURE(status)) return std::string(text);  // ICU data missing: cannot happen with libicu72
  std::string out;
  composed.toUTF8String(out);
  return out;
}

std::string LowercaseUnicode(absl::string_view text) {
  if (IsAscii(text)) {
    std::string out(text);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  const icu::UnicodeString source = FromUtf8(text);
  icu::UnicodeString lowered;
  for (int32_t i = 0; i < source.length();) {
    const UChar32 c = source.char32At(i);
    i += U16_LENGTH(c);
    AppendLower(c, &lowered);
  }
  std::string out;
  lowered.toUTF8String(out);
  return out;
}

bool IsUnicodeWhitespace(int32_t code_point) { return u_isUWhiteSpace(code_point) != 0; }

bool IsRegexWordChar(int32_t code_point) {
  if (u_hasBinaryProperty(code_point, UCHAR_ALPHABETIC) ||
      u_hasBinaryProperty(code_point, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int32_t mask = U_GET_GC_MASK(code_point);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

}  // namespace ditserve::tokenizers
