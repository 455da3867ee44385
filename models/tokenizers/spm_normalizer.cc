#include "models/tokenizers/spm_normalizer.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ditserve::tokenizers {
namespace {

constexpr char kSpaceSymbol[] = "\xe2\x96\x81";  // U+2581
constexpr char kReplacementCharacter[] = "\xef\xbf\xbd";  // U+FFFD

// darts-clone unit fields.
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

bool IsTrail(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

size_t ValidUtf8Length(absl::string_view input) {
  const auto* s = reinterpret_cast<const unsigned char*>(input.data());
  const size_t n = input.size();
  auto valid = [](uint32_t cp) { return cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF); };
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xE0) == 0xC0 && n >= 2 && IsTrail(s[1])) {
    const uint32_t cp = ((s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    return cp >= 0x80 ? 2 : 0;
  }
  if ((s[0] & 0xF0) == 0xE0 && n >= 3 && IsTrail(s[1]) && IsTrail(s[2])) {
    const uint32_t cp = ((s[0] & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    return cp >= 0x800 && valid(cp) ? 3 : 0;
  }
  if ((s[0] & 0xF8) == 0xF0 && n >= 4 && IsTrail(s[1]) && IsTrail(s[2]) && IsTrail(s[3])) {
    const uint32_t cp = ((s[0] & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) |
                        (s[3] & 0x3F);
    return cp >= 0x10000 && valid(cp) ? 4 : 0;
  }
  return 0;
}

absl::StatusOr<SpmNormalizer> SpmNormalizer::Create(const SpmModelProto& model,
                                                    const std::string& file) {
  SpmNormalizer normalizer;
  normalizer.add_dummy_prefix_ = model.add_dummy_prefix;
  normalizer.remove_extra_whitespaces_ = model.remove_extra_whitespaces;
  normalizer.escape_whitespaces_ = model.escape_whitespaces;
  for (const auto& piece : model.pieces) {
    if (piece.type == SpmModelProto::PieceType::kUserDefined) {
      normalizer.user_defined_.push_back(piece.piece);
    }
  }
  std::stable_sort(normalizer.user_defined_.begin(), normalizer.user_defined_.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });

  const std::string& blob = model.precompiled_charsmap;
  if (blob.empty()) return normalizer;  // identity map (e.g. "identity" normaliser)
  // <trie size: u32 little-endian><double-array units><replacement strings>
  if (blob.size() <= 4) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": precompiled_charsmap is truncated"));
  }
  uint32_t trie_size = 0;
  for (int i = 0; i < 4; ++i) trie_size |= static_cast<uint32_t>(static_cast<uint8_t>(blob[i])) << (8 * i);
  if (trie_size >= blob.size() - 4 + 1 || trie_size % 4 != 0 || trie_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": precompiled_charsmap trie size ", trie_size, " does not fit"));
  }
  normalizer.units_.resize(trie_size / 4);
  for (size_t i = 0; i < normalizer.units_.size(); ++i) {
    uint32_t unit = 0;
    for (int b = 0; b < 4; ++b) {
      unit |= static_cast<uint32_t>(static_cast<uint8_t>(blob[4 + 4 * i + b])) << (8 * b);
    }
    normalizer.units_[i] = unit;
  }
  normalizer.replacements_ = blob.substr(4 + trie_size);
  return normalizer;
}

size_t SpmNormalizer::LongestRule(absl::string_view input, uint32_t* value) const {
  if (units_.empty()) return 0;
  const size_t n = units_.size();
  size_t longest = 0;
  uint32_t id = Offset(units_[0]);
  for (size_t i = 0; i < input.size(); ++i) {
    const auto byte = static_cast<uint8_t>(input[i]);
    id ^= byte;
    if (id >= n) break;
    const uint32_t unit = units_[id];
    if (Label(unit) != byte) break;
    id ^= Offset(unit);
    if (id >= n) break;
    if (HasLeaf(unit)) {
      longest = i + 1;
      *value = Value(units_[id]);
    }
  }
  return longest;
}

std::pair<absl::string_view, size_t> SpmNormalizer::NormalizePrefix(
    absl::string_view input) const {
  for (const std::string& symbol : user_defined_) {
    if (absl::StartsWith(input, symbol)) return {input.substr(0, symbol.size()), symbol.size()};
  }
  uint32_t value = 0;
  const size_t rule_length = LongestRule(input, &value);
  if (rule_length > 0 && value < replacements_.size()) {
    const absl::string_view rest = absl::string_view(replacements_).substr(value);
    return {rest.substr(0, rest.find('\0')), rule_length};
  }
  const size_t length = ValidUtf8Length(input);
  if (length == 0) return {kReplacementCharacter, 1};
  return {input.substr(0, length), length};
}

std::string SpmNormalizer::Normalize(absl::string_view input) const {
  std::string out;
  if (remove_extra_whitespaces_) {
    while (!input.empty()) {
      const auto [replacement, consumed] = NormalizePrefix(input);
      if (replacement != " ") break;
      input.remove_prefix(consumed);
    }
  }
  if (input.empty()) return out;
  out.reserve(input.size() * 3);
  const absl::string_view space = escape_whitespaces_ ? kSpaceSymbol : " ";
  if (add_dummy_prefix_) out.append(space.data(), space.size());

  bool previous_was_space = remove_extra_whitespaces_;
  while (!input.empty()) {
    auto [replacement, consumed] = NormalizePrefix(input);
    input.remove_prefix(consumed);
    if (previous_was_space) {
      while (absl::ConsumePrefix(&replacement, " ")) {
      }
    }
    if (!replacement.empty()) {
      for (char c : replacement) {
        if (c == ' ' && escape_whitespaces_) {
          out.append(kSpaceSymbol);
        } else {
          out.push_back(c);
        }
      }
      previous_was_space = replacement.back() == ' ';
    }
    if (!remove_extra_whitespaces_) previous_was_space = false;
  }
  if (remove_extra_whitespaces_) {
    while (absl::EndsWith(out, space)) out.resize(out.size() - space.size());
  }
  return out;
}

}  // namespace ditserve::tokenizers
