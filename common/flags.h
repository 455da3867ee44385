// A small typed command-line parser. Each binary declares one options struct and binds its fields:
//
//   FrontendOptions opts;
//   FlagParser p("ditserve-frontend", "Serves the public API.");
//   p.AddString("listen", &opts.listen, "HOST:PORT of the public API");
//   p.AddInt("max-queue", &opts.max_queue, "admission queue length");
//   p.AddStringList("lora", &opts.loras, "NAME=PATH of an adapter");   // --lora a=x --lora b=y
//   RETURN_IF_ERROR(p.Parse(argc, argv));   // --name value | --name=value | --flag (bool)
//
// Defaults are the field values at bind time and are printed by Help(). A list flag may be given
// any number of times: its first value replaces the default list, each value is appended whole (no
// splitting at commas), and Help() marks it "(repeatable)". Unknown flags, missing values and
// unparsable numbers are errors naming the flag. Positional arguments are collected in order
// (Positional()). Not thread-safe; use from main() only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ditserve {

class FlagParser {
 public:
  FlagParser(std::string program, std::string summary);

  void AddString(const std::string& name, std::string* dest, const std::string& help);
  void AddInt(const std::string& name, int64_t* dest, const std::string& help);
  void AddUint(const std::string& name, uint64_t* dest, const std::string& help);
  void AddDouble(const std::string& name, double* dest, const std::string& help);
  void AddBool(const std::string& name, bool* dest, const std::string& help);
  // Repeatable: see the top of this file.
  void AddStringList(const std::string& name, std::vector<std::string>* dest,
                     const std::string& help);

  // Parses argv[first..argc). Returns an error naming the offending flag. "--help" sets
  // HelpRequested() and stops parsing.
  absl::Status Parse(int argc, const char* const* argv, int first = 1);

  bool HelpRequested() const { return help_requested_; }
  // True when the flag appeared on the command line (as opposed to keeping its default).
  bool WasSet(const std::string& name) const;
  const std::vector<std::string>& Positional() const { return positional_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool set = false;
    std::function<absl::Status(const std::string&)> assign;
  };
  Flag* Find(const std::string& name);

  std::string program_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace ditserve
