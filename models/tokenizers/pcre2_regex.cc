#include "models/tokenizers/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode_text.h"

namespace ditserve::tokenizers {
namespace {

// Oniguruma's Unicode \s and \w as PCRE2 class items (usable inside or outside brackets).
constexpr char kSpaceItems[] = "\\t-\\r\\x{85}\\p{Zs}\\p{Zl}\\p{Zp}";
constexpr char kWordItems[] = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr char kHexItems[] = "0-9a-fA-F";

bool IsHexDigit(char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); }

absl::Status Unsupported(absl::string_view pattern, size_t pos, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("regex \"", pattern, "\" at offset ", pos, ": ",
                                                 what, " is not supported"));
}

// "(?imx-imx:" / "(?imx)" option groups: Oniguruma's m is PCRE2's s. Returns the translated group
// opening and advances *i past it; other "(?" forms are copied as they are.
absl::Status TranslateGroupOpening(absl::string_view p, size_t* i, std::string* out) {
  size_t j = *i + 2;  // after "(?"
  std::string letters;
  while (j < p.size() && (absl::ascii_isalpha(static_cast<unsigned char>(p[j])) || p[j] == '-')) {
    letters.push_back(p[j]);
    ++j;
  }
  if (letters.empty() || j >= p.size() || (p[j] != ':' && p[j] != ')')) {
    out->append("(?");  // look-around, named group, atomic group, comment, ...
    *i += 2;
    return absl::OkStatus();
  }
  std::string translated;
  for (char c : letters) {
    if (c == 'i' || c == 'x' || c == '-') {
      translated.push_back(c);
    } else if (c == 'm') {
      translated.push_back('s');
    } else {
      return Unsupported(p, *i, absl::StrCat("the Oniguruma option (?", std::string(1, c), ")"));
    }
  }
  absl::StrAppend(out, "(?", translated, std::string(1, p[j]));
  *i = j + 1;
  return absl::OkStatus();
}

// The escape at p[*i] (a backslash): Oniguruma's Unicode \s \w \h and their negations as PCRE2
// class items, \uHHHH as \x{HHHH}, any other escape copied. Advances *i past it.
absl::Status TranslateEscape(absl::string_view p, bool in_class, size_t* i, std::string* out) {
  const size_t at = *i;
  if (at + 1 >= p.size()) return Unsupported(p, at, "a trailing backslash");
  const char d = p[at + 1];
  // `body`'s items; negated, a class of their complement outside a class, `in_class_escape` in one.
  auto items = [&](const char* body, bool negate, const char* in_class_escape) {
    if (in_class) {
      out->append(negate ? in_class_escape : body);
    } else {
      absl::StrAppend(out, negate ? "[^" : "[", body, "]");
    }
  };
  switch (d) {
    case 's':
      items(kSpaceItems, false, nullptr);
      break;
    case 'w':
      items(kWordItems, false, nullptr);
      break;
    case 'h':
      items(kHexItems, false, nullptr);
      break;
    case 'S':
      items(kSpaceItems, true, "\\S");
      break;
    case 'W':
      items(kWordItems, true, "\\W");
      break;
    case 'H':
      if (in_class) return Unsupported(p, at, "\\H inside a character class");
      items(kHexItems, true, nullptr);
      break;
    case 'u':
      if (at + 6 <= p.size() && IsHexDigit(p[at + 2]) && IsHexDigit(p[at + 3]) &&
          IsHexDigit(p[at + 4]) && IsHexDigit(p[at + 5])) {
        absl::StrAppend(out, "\\x{", p.substr(at + 2, 4), "}");
        *i += 6;
        return absl::OkStatus();
      }
      return Unsupported(p, at, "\\u without four hex digits");
    default:
      out->push_back('\\');
      out->push_back(d);
  }
  *i += 2;
  return absl::OkStatus();
}

// Where a character class is: open or not, and the offset of its first item (a ']' there is
// literal).
struct ClassState {
  bool open = false;
  size_t first = 0;
};

// The unescaped character at p[*i] inside a character class: POSIX classes copied, nested sets and
// intersections refused, a ']' past the first item closes the class. Advances *i past it.
absl::Status TranslateInClass(absl::string_view p, size_t* i, ClassState* cls, std::string* out) {
  const char c = p[*i];
  if (c == '[') {
    if (*i + 1 < p.size() && p[*i + 1] == ':') {  // POSIX class [:alpha:]
      const size_t end = p.find(":]", *i + 2);
      if (end == absl::string_view::npos) return Unsupported(p, *i, "an unterminated [:");
      out->append(p.data() + *i, end + 2 - *i);
      *i = end + 2;
      return absl::OkStatus();
    }
    return Unsupported(p, *i, "a nested character set");
  }
  if (c == '&' && *i + 1 < p.size() && p[*i + 1] == '&') {
    return Unsupported(p, *i, "character class intersection (&&)");
  }
  if (c == ']' && *i != cls->first) cls->open = false;
  out->push_back(c);
  ++*i;
  return absl::OkStatus();
}

// The unescaped character at p[*i] outside a character class: '[' opens one, ^ and $ match at
// line boundaries as in Oniguruma, "(?" option groups are translated. Advances *i past it.
absl::Status TranslateOutsideClass(absl::string_view p, size_t* i, ClassState* cls,
                                   std::string* out) {
  const char c = p[*i];
  switch (c) {
    case '[':
      cls->open = true;
      out->push_back(c);
      ++*i;
      if (*i < p.size() && p[*i] == '^') {
        out->push_back('^');
        ++*i;
      }
      cls->first = *i;
      return absl::OkStatus();
    case '^':
      out->append("(?m:^)");
      break;
    case '$':
      out->append("(?m:$)");
      break;
    case '(':
      if (*i + 1 < p.size() && p[*i + 1] == '?') return TranslateGroupOpening(p, i, out);
      out->push_back(c);
      break;
    default:
      out->push_back(c);
  }
  ++*i;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> TranslateOnigurumaPattern(absl::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  ClassState cls;
  for (size_t i = 0; i < p.size();) {
    if (p[i] == '\\') {
      RETURN_IF_ERROR(TranslateEscape(p, cls.open, &i, &out));
    } else if (cls.open) {
      RETURN_IF_ERROR(TranslateInClass(p, &i, &cls, &out));
    } else {
      RETURN_IF_ERROR(TranslateOutsideClass(p, &i, &cls, &out));
    }
  }
  if (cls.open) return Unsupported(p, p.size(), "an unterminated character class");
  return out;
}

struct Pcre2Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Pcre2Regex::Pcre2Regex() = default;
Pcre2Regex::Pcre2Regex(Pcre2Regex&&) noexcept = default;
Pcre2Regex& Pcre2Regex::operator=(Pcre2Regex&&) noexcept = default;
Pcre2Regex::~Pcre2Regex() = default;

absl::StatusOr<Pcre2Regex> Pcre2Regex::Compile(absl::string_view pattern) {
  if (!IsValidUtf8(pattern)) {
    return absl::InvalidArgumentError(absl::StrCat("regex is not valid UTF-8: \"", pattern, "\""));
  }
  Pcre2Regex regex;
  regex.pattern_ = std::string(pattern);
  ASSIGN_OR_RETURN(regex.pcre2_pattern_, TranslateOnigurumaPattern(pattern));

  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  if (context == nullptr) return absl::ResourceExhaustedError("pcre2_compile_context_create");
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);  // Oniguruma's newline is LF alone
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(regex.pcre2_pattern_.data()), regex.pcre2_pattern_.size(),
      PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "regex \"", pattern, "\" does not compile (as PCRE2 \"", regex.pcre2_pattern_,
        "\", offset ", offset, "): ", reinterpret_cast<const char*>(message)));
  }
  regex.code_ = std::make_unique<Code>();
  regex.code_->code = code;
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
  return regex;
}

absl::StatusOr<Pcre2Regex> Pcre2Regex::CompileLiteral(absl::string_view literal) {
  std::string escaped;
  for (char c : literal) {
    if (absl::ascii_ispunct(static_cast<unsigned char>(c))) escaped.push_back('\\');
    escaped.push_back(c);
  }
  return Compile(escaped);
}

absl::Status Pcre2Regex::FindAll(absl::string_view text,
                                 std::vector<std::pair<size_t, size_t>>* matches) const {
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  if (data == nullptr) return absl::ResourceExhaustedError("pcre2_match_data_create_from_pattern");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  absl::Status status;
  size_t search_from = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK, data,
                         nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // deep backtracking: the interpreter uses the heap
      rc = pcre2_match(code_->code, subject, text.size(), search_from,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      status = absl::ResourceExhaustedError(absl::StrCat(
          "regex \"", pattern_, "\" on ", text.size(), "-byte text: ",
          reinterpret_cast<const char*>(message)));
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (begin == end && have_last && last_match_end == end) {
      // An empty match where the previous one ended: step over one character.
      if (search_from >= text.size()) break;
      int32_t code_point;
      search_from += DecodeUtf8(text, search_from, &code_point);
      continue;
    }
    matches->emplace_back(begin, end);
    search_from = end;
    have_last = true;
    last_match_end = end;
  }
  pcre2_match_data_free(data);
  return status;
}

}  // namespace ditserve::tokenizers
