// Subcommands of ditserve-tool register themselves with DITSERVE_TOOL_COMMAND in their own .cc
// file (one file per subcommand, compiled straight into the executable so the registration is
// kept). main() dispatches on argv[1].
#pragma once

#include <functional>
#include <map>
#include <string>

namespace ditserve::tools {

// argv[0] is the subcommand name; flags follow. Returns the process exit code.
using ToolMain = std::function<int(int argc, const char* const* argv)>;

struct ToolCommand {
  std::string summary;
  ToolMain main;
};

std::map<std::string, ToolCommand>& ToolRegistry();

struct ToolRegistrar {
  ToolRegistrar(const std::string& name, const std::string& summary, ToolMain fn) {
    ToolRegistry()[name] = ToolCommand{summary, std::move(fn)};
  }
};

}  // namespace ditserve::tools

#define DITSERVE_TOOL_COMMAND(name, summary, fn) \
  static ::ditserve::tools::ToolRegistrar ditserve_tool_registrar_##fn(name, summary, fn)
