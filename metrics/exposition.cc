#include "metrics/exposition.h"

#include <algorithm>
#include <iterator>

#include <prometheus/text_serializer.h>

namespace ditserve::metrics {
namespace {

// HELP escaping of the text format: '\' -> "\\", newline -> "\n" (nothing else).
void EscapeHelp(std::string& help) {
  if (help.find_first_of("\\\n") == std::string::npos) return;
  std::string out;
  out.reserve(help.size() + 8);
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  help = std::move(out);
}

}  // namespace

std::vector<prometheus::MetricFamily> CollectAll(
    const std::vector<const prometheus::Collectable*>& sources) {
  std::vector<prometheus::MetricFamily> families;
  for (const prometheus::Collectable* source : sources) {
    std::vector<prometheus::MetricFamily> part = source->Collect();
    families.insert(families.end(), std::make_move_iterator(part.begin()),
                    std::make_move_iterator(part.end()));
  }
  return families;
}

std::string SerializeTextExposition(std::vector<prometheus::MetricFamily> families) {
  for (prometheus::MetricFamily& family : families) {
    EscapeHelp(family.help);
    std::sort(family.metric.begin(), family.metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                return a.label < b.label;
              });
  }
  return prometheus::TextSerializer().Serialize(families);
}

std::string RenderTextExposition(const std::vector<const prometheus::Collectable*>& sources) {
  return SerializeTextExposition(CollectAll(sources));
}

}  // namespace ditserve::metrics
