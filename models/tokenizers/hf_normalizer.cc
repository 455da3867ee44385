#include "models/tokenizers/hf_normalizer.h"

#include <utility>

#include "models/tokenizers/unicode_text.h"

namespace ditserve::tokenizers {

void HfNormalizer::AddNfc() { steps_.push_back(Step{Kind::kNfc, std::nullopt, ""}); }

void HfNormalizer::AddLowercase() { steps_.push_back(Step{Kind::kLowercase, std::nullopt, ""}); }

void HfNormalizer::AddReplace(Pcre2Regex pattern, std::string content) {
  steps_.push_back(Step{Kind::kReplace, std::move(pattern), std::move(content)});
}

absl::StatusOr<std::string> HfNormalizer::Normalize(absl::string_view text) const {
  std::string current(text);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc:
        current = NfcNormalize(current);
        break;
      case Kind::kLowercase:
        current = LowercaseUnicode(current);
        break;
      case Kind::kReplace: {
        if (current.empty()) break;
        matches.clear();
        if (absl::Status s = step.pattern->FindAll(current, &matches); !s.ok()) return s;
        if (matches.empty()) break;
        std::string replaced;
        replaced.reserve(current.size());
        size_t copied = 0;
        for (const auto& [begin, end] : matches) {
          replaced.append(current, copied, begin - copied);
          replaced.append(step.content);
          copied = end;
        }
        replaced.append(current, copied, std::string::npos);
        current = std::move(replaced);
        break;
      }
    }
  }
  return current;
}

}  // namespace ditserve::tokenizers
