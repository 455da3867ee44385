#include "models/tokenizers/byte_level.h"

namespace ditserve::tokenizers {
namespace {

std::string Utf8(int code_point) {  // code points here are < 0x800
  std::string s;
  if (code_point < 0x80) {
    s.push_back(static_cast<char>(code_point));
  } else {
    s.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    s.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return s;
}

std::array<std::string, 256> BuildTable() {
  std::array<std::string, 256> table;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = Utf8(visible ? b : next++);
  }
  return table;
}

}  // namespace

const std::array<std::string, 256>& ByteToUnicodeTable() {
  static const std::array<std::string, 256> table = BuildTable();
  return table;
}

void AppendByteLevel(absl::string_view text, std::string* out) {
  const auto& table = ByteToUnicodeTable();
  for (char c : text) out->append(table[static_cast<unsigned char>(c)]);
}

}  // namespace ditserve::tokenizers
