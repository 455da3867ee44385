// ditserve-tool: offline tools (plan, forward, make-tiny-model, ...). See tool_registry.h.
#include <cstdio>
#include <string>

#include "tools/tool_registry.h"

namespace ditserve::tools {

std::map<std::string, ToolCommand>& ToolRegistry() {
  static auto* registry = new std::map<std::string, ToolCommand>();
  return *registry;
}

}  // namespace ditserve::tools

int main(int argc, char** argv) {
  auto& registry = ditserve::tools::ToolRegistry();
  auto usage = [&]() {
    std::fprintf(stderr, "usage: ditserve-tool COMMAND [flags]   (COMMAND --help for its flags)\n\n");
    for (const auto& [name, cmd] : registry) {
      std::fprintf(stderr, "  %-18s %s\n", name.c_str(), cmd.summary.c_str());
    }
  };
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage();
    return argc < 2 ? 2 : 0;
  }
  auto it = registry.find(argv[1]);
  if (it == registry.end()) {
    std::fprintf(stderr, "ditserve-tool: unknown command '%s'\n\n", argv[1]);
    usage();
    return 2;
  }
  return it->second.main(argc - 1, argv + 1);
}
