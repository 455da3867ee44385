#include "tests/support/exposition_parser.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ditserve::metrics {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsLabelStart(char c) { return c != ':' && IsNameStart(c); }
bool IsLabelChar(char c) { return c != ':' && IsNameChar(c); }

bool ParseFloatToken(absl::string_view token, double& out) {
  if (token == "NaN" || token == "Nan" || token == "nan") {
    out = std::nan("");
    return true;
  }
  if (token == "+Inf" || token == "Inf" || token == "+inf" || token == "inf") {
    out = INFINITY;
    return true;
  }
  if (token == "-Inf" || token == "-inf") {
    out = -INFINITY;
    return true;
  }
  if (token.empty()) return false;
  for (char c : token) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return false;
    }
  }
  return absl::SimpleAtod(token, &out);
}

// Cursor over one line.
class LineReader {
 public:
  explicit LineReader(absl::string_view line) : line_(line) {}
  bool AtEnd() const { return pos_ >= line_.size(); }
  char Peek() const { return line_[pos_]; }
  void SkipBlanks() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t')) ++pos_;
  }
  // Reads a name made of [start][char]*; empty if none.
  template <typename Start, typename Char>
  absl::string_view ReadName(Start start, Char chr) {
    const size_t begin = pos_;
    if (AtEnd() || !start(Peek())) return {};
    ++pos_;
    while (!AtEnd() && chr(Peek())) ++pos_;
    return line_.substr(begin, pos_ - begin);
  }
  absl::string_view ReadToken() {
    const size_t begin = pos_;
    while (!AtEnd() && Peek() != ' ' && Peek() != '\t') ++pos_;
    return line_.substr(begin, pos_ - begin);
  }
  absl::string_view Rest() const { return line_.substr(std::min(pos_, line_.size())); }
  bool Consume(char c) {
    if (AtEnd() || Peek() != c) return false;
    ++pos_;
    return true;
  }
  // Reads a quoted label value (opening quote already consumed) with \\ \" \n escapes.
  absl::Status ReadQuoted(std::string& out) {
    while (!AtEnd()) {
      char c = line_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (c == '\\') {
        if (AtEnd()) break;
        char e = line_[pos_++];
        if (e == '\\') {
          out += '\\';
        } else if (e == '"') {
          out += '"';
        } else if (e == 'n') {
          out += '\n';
        } else {
          return absl::InvalidArgumentError(absl::StrCat("invalid escape \\", std::string(1, e),
                                                         " in label value"));
        }
      } else {
        out += c;
      }
    }
    return absl::InvalidArgumentError("unterminated label value");
  }

 private:
  absl::string_view line_;
  size_t pos_ = 0;
};

absl::Status UnescapeHelp(absl::string_view text, std::string& out) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (i + 1 >= text.size()) return absl::InvalidArgumentError("dangling backslash in HELP");
    const char e = text[++i];
    if (e == '\\') {
      out += '\\';
    } else if (e == 'n') {
      out += '\n';
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid escape \\", std::string(1, e), " in HELP"));
    }
  }
  return absl::OkStatus();
}

std::string SeriesKey(absl::string_view name, const Labels& labels) {
  std::string key(name);
  for (const auto& [k, v] : labels) absl::StrAppend(&key, "\x1f", k, "\x1e", v);
  return key;
}

// State of one histogram series (label set without le) while its lines stream by.
struct HistogramSeries {
  std::vector<double> bounds;
  std::vector<double> values;
  bool has_inf = false;
  std::optional<double> sum;
  std::optional<double> count;
  int first_line = 0;
};

}  // namespace

const ParsedSample* ParsedExposition::Find(absl::string_view name, const Labels& labels) const {
  for (const ParsedSample& s : samples) {
    if (s.name == name && s.labels == labels) return &s;
  }
  return nullptr;
}

absl::StatusOr<ParsedExposition> ParseTextExposition(absl::string_view text) {
  ParsedExposition out;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the last line does not end with a newline");
  }
  std::string current_family;
  std::set<std::string> finished_families;
  std::set<std::string> families_with_samples;
  std::set<std::string> series_seen;
  std::map<std::string, std::map<std::string, HistogramSeries>> histograms;  // family -> key -> h

  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // after the final '\n'

  auto enter_family = [&](const std::string& family, int line_no) -> absl::Status {
    if (family == current_family) return absl::OkStatus();
    if (finished_families.count(family) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_no, ": family ", family, " reappears after other families (not contiguous)"));
    }
    if (!current_family.empty()) finished_families.insert(current_family);
    current_family = family;
    return absl::OkStatus();
  };

  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    auto fail = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", what, ": \"",
                                                     lines[i], "\""));
    };
    LineReader r(lines[i]);
    r.SkipBlanks();
    if (r.AtEnd()) continue;

    if (r.Consume('#')) {
      r.SkipBlanks();
      const absl::string_view keyword = r.ReadToken();
      if (keyword != "HELP" && keyword != "TYPE") continue;  // plain comment
      r.SkipBlanks();
      const std::string name(r.ReadName(IsNameStart, IsNameChar));
      if (name.empty()) return fail("missing or invalid metric name");
      if (!r.AtEnd() && !r.Consume(' ') && !r.Consume('\t')) return fail("invalid metric name");
      absl::Status s = enter_family(name, line_no);
      if (!s.ok()) return s;
      if (keyword == "HELP") {
        if (out.help.count(name) > 0) return fail("second HELP line for this family");
        std::string help;
        s = UnescapeHelp(r.Rest(), help);
        if (!s.ok()) return fail(s.message());
        out.help[name] = help;
      } else {
        if (out.types.count(name) > 0) return fail("second TYPE line for this family");
        if (families_with_samples.count(name) > 0) return fail("TYPE after the family's samples");
        r.SkipBlanks();
        const std::string type(r.ReadToken());
        r.SkipBlanks();
        if (!r.AtEnd()) return fail("TYPE line has more than one type token");
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
            type != "untyped") {
          return fail("unknown metric type");
        }
        out.types[name] = type;
      }
      continue;
    }

    ParsedSample sample;
    sample.name = std::string(r.ReadName(IsNameStart, IsNameChar));
    if (sample.name.empty()) return fail("missing or invalid metric name");
    if (r.Consume('{')) {
      while (true) {
        r.SkipBlanks();
        if (r.Consume('}')) break;
        const std::string label(r.ReadName(IsLabelStart, IsLabelChar));
        if (label.empty()) return fail("invalid label name");
        r.SkipBlanks();
        if (!r.Consume('=')) return fail("expected '=' after label name");
        r.SkipBlanks();
        if (!r.Consume('"')) return fail("expected '\"' to open the label value");
        std::string value;
        absl::Status s = r.ReadQuoted(value);
        if (!s.ok()) return fail(s.message());
        if (!sample.labels.emplace(label, value).second) return fail("repeated label name");
        r.SkipBlanks();
        if (r.Consume(',')) continue;
        if (r.Consume('}')) break;
        return fail("expected ',' or '}' after a label");
      }
    }
    if (r.AtEnd() || (r.Peek() != ' ' && r.Peek() != '\t')) return fail("expected a blank before the value");
    r.SkipBlanks();
    if (!ParseFloatToken(r.ReadToken(), sample.value)) return fail("invalid sample value");
    r.SkipBlanks();
    if (!r.AtEnd()) {
      int64_t timestamp;
      if (!absl::SimpleAtoi(r.ReadToken(), &timestamp)) return fail("invalid timestamp");
      r.SkipBlanks();
      if (!r.AtEnd()) return fail("trailing characters after the timestamp");
    }

    // Which family does this sample belong to?
    std::string family = sample.name;
    std::string suffix;
    for (const char* sfx : {"_bucket", "_sum", "_count"}) {
      if (absl::EndsWith(sample.name, sfx)) {
        const std::string base = sample.name.substr(0, sample.name.size() - strlen(sfx));
        auto t = out.types.find(base);
        if (t != out.types.end() &&
            (t->second == "histogram" || (t->second == "summary" && std::string(sfx) != "_bucket"))) {
          family = base;
          suffix = sfx;
        }
        break;
      }
    }
    absl::Status s = enter_family(family, line_no);
    if (!s.ok()) return s;
    families_with_samples.insert(family);
    if (!series_seen.insert(SeriesKey(sample.name, sample.labels)).second) {
      return fail("duplicate series");
    }

    auto type_it = out.types.find(family);
    if (type_it != out.types.end() && type_it->second == "histogram") {
      if (suffix.empty()) return fail("histogram sample without _bucket/_sum/_count suffix");
      Labels key_labels = sample.labels;
      std::optional<double> le;
      if (suffix == "_bucket") {
        auto le_it = key_labels.find("le");
        if (le_it == key_labels.end()) return fail("_bucket sample without le label");
        double bound;
        if (!ParseFloatToken(le_it->second, bound) || std::isnan(bound)) return fail("invalid le");
        le = bound;
        key_labels.erase(le_it);
      } else if (key_labels.count("le") > 0) {
        return fail("le label outside _bucket");
      }
      HistogramSeries& h = histograms[family][SeriesKey("", key_labels)];
      if (h.first_line == 0) h.first_line = line_no;
      if (le.has_value()) {
        if (h.has_inf) return fail("bucket after le=\"+Inf\"");
        if (!h.bounds.empty() && !(*le > h.bounds.back())) return fail("le not strictly increasing");
        if (!h.values.empty() && sample.value < h.values.back()) {
          return fail("bucket value decreases (buckets must be cumulative)");
        }
        h.bounds.push_back(*le);
        h.values.push_back(sample.value);
        if (std::isinf(*le) && *le > 0) h.has_inf = true;
      } else if (suffix == "_sum") {
        h.sum = sample.value;
      } else {
        h.count = sample.value;
      }
    }
    out.samples.push_back(std::move(sample));
  }

  for (const auto& [family, series] : histograms) {
    for (const auto& [key, h] : series) {
      const std::string where = absl::StrCat("histogram ", family, " (series starting on line ",
                                             h.first_line, ")");
      if (!h.has_inf) return absl::InvalidArgumentError(where + ": no le=\"+Inf\" bucket");
      if (!h.count.has_value()) return absl::InvalidArgumentError(where + ": no _count");
      if (!h.sum.has_value()) return absl::InvalidArgumentError(where + ": no _sum");
      if (*h.count != h.values.back()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": _count ", *h.count,
                                                       " != +Inf bucket ", h.values.back()));
      }
    }
  }
  return out;
}

}  // namespace ditserve::metrics
