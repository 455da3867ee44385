#include "common/flags.h"

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ditserve {

FlagParser::FlagParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void FlagParser::AddString(const std::string& name, std::string* dest, const std::string& help) {
  flags_.push_back({name, help, *dest, false, false, [dest](const std::string& v) {
                      *dest = v;
                      return absl::OkStatus();
                    }});
}

void FlagParser::AddInt(const std::string& name, int64_t* dest, const std::string& help) {
  flags_.push_back({name, help, std::to_string(*dest), false, false,
                    [dest, name](const std::string& v) {
                      if (!absl::SimpleAtoi(v, dest)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("--", name, ": '", v, "' is not an integer"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagParser::AddUint(const std::string& name, uint64_t* dest, const std::string& help) {
  flags_.push_back({name, help, std::to_string(*dest), false, false,
                    [dest, name](const std::string& v) {
                      if (v.empty() || v[0] == '-' || !absl::SimpleAtoi(v, dest)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("--", name, ": '", v, "' is not a non-negative integer"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagParser::AddDouble(const std::string& name, double* dest, const std::string& help) {
  flags_.push_back({name, help, absl::StrCat(*dest), false, false,
                    [dest, name](const std::string& v) {
                      if (!absl::SimpleAtod(v, dest)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("--", name, ": '", v, "' is not a number"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagParser::AddBool(const std::string& name, bool* dest, const std::string& help) {
  flags_.push_back({name, help, *dest ? "true" : "false", true, false,
                    [dest, name](const std::string& v) {
                      if (v == "true" || v == "1" || v.empty()) {
                        *dest = true;
                      } else if (v == "false" || v == "0") {
                        *dest = false;
                      } else {
                        return absl::InvalidArgumentError(
                            absl::StrCat("--", name, ": '", v, "' is not true or false"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagParser::AddStringList(const std::string& name, std::vector<std::string>* dest,
                               const std::string& help) {
  // The first value given replaces the default list.
  auto first = std::make_shared<bool>(true);
  flags_.push_back({name, help + " (repeatable)", absl::StrJoin(*dest, " "), false, false,
                    [dest, first](const std::string& v) {
                      if (*first) dest->clear();
                      *first = false;
                      dest->push_back(v);
                      return absl::OkStatus();
                    }});
}

FlagParser::Flag* FlagParser::Find(const std::string& name) {
  for (auto& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagParser::WasSet(const std::string& name) const {
  for (const auto& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

absl::Status FlagParser::Parse(int argc, const char* const* argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see ", program_, " --help)"));
    }
    if (!has_value && !flag->is_bool) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (absl::Status s = flag->assign(value); !s.ok()) return s;
    flag->set = true;
  }
  return absl::OkStatus();
}

std::string FlagParser::Help() const {
  std::string out = absl::StrCat(program_, ": ", summary_, "\n\nFlags:\n");
  for (const auto& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, f.is_bool ? "" : " VALUE", "\n      ", f.help,
                    " (default: ", f.default_text.empty() ? "\"\"" : f.default_text, ")\n");
  }
  return out;
}

}  // namespace ditserve
