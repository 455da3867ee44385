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

}  // namespace

absl::StatusOr<std::string> TranslateOnigurumaPattern(absl::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t class_first = 0;  // offset of the first item of the open class (a ']' there is literal)
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return Unsupported(p, i, "a trailing backslash");
      const char d = p[i + 1];
      auto items = [&](const char* body, bool negate) {
        if (in_class) {
          out.append(body);
        } else {
          absl::StrAppend(&out, negate ? "[^" : "[", body, "]");
        }
      };
      switch (d) {
        case 's': items(kSpaceItems, false); break;
        case 'w': items(kWordItems, false); break;
        case 'h': items(kHexItems, false); break;
        case 'S':
          if (in_class) out.append("\\S"); else items(kSpaceItems, true);
          break;
        case 'W':
          if (in_class) out.append("\\W"); else items(kWordItems, true);
          break;
        case 'H':
          if (in_class) return Unsupported(p, i, "\\H inside a character class");
          items(kHexItems, true);
          break;
        case 'u':
          if (i + 6 <= p.size() && IsHexDigit(p[i + 2]) &&
              IsHexDigit(p[i + 3]) && IsHexDigit(p[i + 4]) && IsHexDigit(p[i + 5])) {
            absl::StrAppend(&out, "\\x{", p.substr(i + 2, 4), "}");
            i += 6;
            continue;
          }
          return Unsupported(p, i, "\\u without four hex digits");
        default:
          out.push_back(c);
          out.push_back(d);
      }
      i += 2;
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]
          const size_t end = p.find(":]", i + 2);
          if (end == absl::string_view::npos) return Unsupported(p, i, "an unterminated [:");
          out.append(p.data() + i, end + 2 - i);
          i = end + 2;
          continue;
        }
        return Unsupported(p, i, "a nested character set");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        return Unsupported(p, i, "character class intersection (&&)");
      }
      if (c == ']' && i != class_first) in_class = false;
      out.push_back(c);
      ++i;
      continue;
    }
    switch (c) {
      case '[':
        in_class = true;
        out.push_back(c);
        ++i;
        if (i < p.size() && p[i] == '^') {
          out.push_back('^');
          ++i;
        }
        class_first = i;
        continue;
      case '^': out.append("(?m:^)"); break;
      case '$': out.append("(?m:$)"); break;
      case '(':
        if (i + 1 < p.size() && p[i + 1] == '?') {
          RETURN_IF_ERROR(TranslateGroupOpening(p, &i, &out));
          continue;
        }
        out.push_back(c);
        break;
      default: out.push_back(c);
    }
    ++i;
  }
  if (in_class) return Unsupported(p, p.size(), "an unterminated character class");
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
