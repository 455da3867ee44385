#include "models/tokenizers/hf_pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "models/tokenizers/byte_level.h"

namespace ditserve::tokenizers {
namespace {

// The pattern of tokenizers' ByteLevel pre-tokenizer (GPT-2's encoder.py).
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

}  // namespace

void HfPreTokenizer::AddSplit(Pcre2Regex pattern, SplitBehavior behavior, bool invert) {
  Step step{Kind::kSplit, std::move(pattern)};
  step.behavior = behavior;
  step.invert = invert;
  steps_.push_back(std::move(step));
}

absl::Status HfPreTokenizer::AddByteLevel(bool add_prefix_space, bool use_regex) {
  ASSIGN_OR_RETURN(Pcre2Regex gpt2, Pcre2Regex::Compile(kGpt2Pattern));
  Step step{Kind::kByteLevel, std::move(gpt2)};
  step.add_prefix_space = add_prefix_space;
  step.use_regex = use_regex;
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status HfPreTokenizer::SplitPiece(const Pcre2Regex& pattern, SplitBehavior behavior,
                                        bool invert, absl::string_view piece,
                                        std::vector<std::string>* out) const {
  // The whole piece as alternating gaps and matches (tokenizers' Pattern::find_matches).
  std::vector<std::pair<size_t, size_t>> matches;
  RETURN_IF_ERROR(pattern.FindAll(piece, &matches));
  std::vector<Segment> segments;
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (previous != begin) segments.push_back({previous, begin, false});
    segments.push_back({begin, end, true});
    previous = end;
  }
  if (previous != piece.size()) segments.push_back({previous, piece.size(), false});
  if (invert) {
    for (Segment& s : segments) s.is_match = !s.is_match;
  }

  // (begin, end, keep) per behaviour (NormalizedString::split).
  std::vector<Segment> kept;  // is_match reused as "remove"
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) kept.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      kept = segments;
      break;
    case SplitBehavior::kContiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Segment& s : kept) {
    if (!s.is_match && s.end > s.begin) out->emplace_back(piece.substr(s.begin, s.end - s.begin));
  }
  return absl::OkStatus();
}

absl::Status HfPreTokenizer::Run(absl::string_view text, std::vector<std::string>* words) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<std::string> pieces = {std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string& piece : pieces) {
      if (step.kind == Kind::kSplit) {
        RETURN_IF_ERROR(SplitPiece(step.pattern, step.behavior, step.invert, piece, &next));
        continue;
      }
      std::string prefixed;
      absl::string_view source = piece;
      if (step.add_prefix_space && piece[0] != ' ') {
        prefixed = " " + piece;
        source = prefixed;
      }
      const size_t first = next.size();
      if (step.use_regex) {
        RETURN_IF_ERROR(
            SplitPiece(step.pattern, SplitBehavior::kIsolated, /*invert=*/false, source, &next));
      } else {
        next.emplace_back(source);
      }
      for (size_t i = first; i < next.size(); ++i) {
        std::string mapped;
        AppendByteLevel(next[i], &mapped);
        next[i] = std::move(mapped);
      }
    }
    pieces.swap(next);
  }
  for (std::string& piece : pieces) words->push_back(std::move(piece));
  return absl::OkStatus();
}

}  // namespace ditserve::tokenizers
