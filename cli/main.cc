// ditserve-cli: command-line client of the ditserve public API.
//
//   ditserve-cli generate --server HOST:PORT --prompt "..." -o out.png
//   ditserve-cli info     --server HOST:PORT
//   ditserve-cli health   --server HOST:PORT [--service NAME]
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/channel.h"
#include "cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: ditserve-cli <command> [flags]\n"
    "\n"
    "commands:\n"
    "  generate  run one generation (streaming progress) and write the image\n"
    "  info      print the served model, its sharding and request limits as JSON\n"
    "  health    print the gRPC health status; exit 0 only when SERVING\n"
    "\n"
    "ditserve-cli <command> --help lists the flags of a command.\n"
    "exit status: 0 ok, 1 the call failed (or not SERVING), 2 bad command line.\n";

}  // namespace

int main(int argc, char** argv) {
  // FlagParser only knows --long flags; -o is the one short flag, spelled as everyone expects.
  std::vector<const char*> args(argv, argv + argc);
  for (size_t i = 2; i < args.size(); ++i) {
    if (std::strcmp(args[i], "-o") == 0) args[i] = "--output";
  }
  int n = static_cast<int>(args.size());
  if (n < 2 || std::strcmp(args[1], "--help") == 0 || std::strcmp(args[1], "-h") == 0 ||
      std::strcmp(args[1], "help") == 0) {
    std::fputs(kUsage, n < 2 ? stderr : stdout);
    return n < 2 ? ditserve::cli::kExitUsage : ditserve::cli::kExitOk;
  }
  std::string command = args[1];
  if (command == "generate") return ditserve::cli::RunGenerate(n, args.data(), 2);
  if (command == "info") return ditserve::cli::RunInfo(n, args.data(), 2);
  if (command == "health") return ditserve::cli::RunHealth(n, args.data(), 2);
  std::fprintf(stderr, "error: INVALID_ARGUMENT: unknown command '%s'\n\n%s", command.c_str(),
               kUsage);
  return ditserve::cli::kExitUsage;
}
