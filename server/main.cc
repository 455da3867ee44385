// ditserve-frontend: the public gRPC API (and the optional OpenAI-style images HTTP API) in front of
// a tensor-parallel worker group. SIGTERM / SIGINT drain and stop; SIGHUP forms a worker group that
// failed to form again at once (WorkerGroup::RetryNow: for an operator who fixed the model folder).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/flags.h"
#include "common/logging.h"
#include "server/frontend_options.h"
#include "server/frontend_server.h"

namespace ditserve::server {
namespace {

std::string DefaultWorkerBinary() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "ditserve-worker";
  for (auto candidate : {self.parent_path() / "ditserve-worker",
                         self.parent_path().parent_path() / "worker" / "ditserve-worker"}) {
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return "ditserve-worker";
}

int Run(int argc, char** argv) {
  FrontendOptions options;
  options.log.name = "frontend";
  FlagParser parser("ditserve-frontend",
                    "serves the ditserve.v1 API over a tensor-parallel worker group");
  BindFrontendFlags(parser, options);
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ditserve-frontend: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (parser.HelpRequested()) {
    std::fputs(parser.Help().c_str(), stdout);
    return 0;
  }
  if (absl::Status s = ValidateFrontendOptions(options); !s.ok()) {
    std::fprintf(stderr, "ditserve-frontend: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = SetupLogging(options.log); !s.ok()) {
    std::fprintf(stderr, "ditserve-frontend: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  // Block the signals in every thread; this thread waits for them below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = FrontendServer::Start(options, MakeWorkerGroupOptions(options, DefaultWorkerBinary()));
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  spdlog::info("ditserve-frontend {} listening on port {} (model {}, tp={})", DITSERVE_VERSION,
               (*server)->port(), options.model_dir, options.WorldSize());
  // Machine-readable lines for scripts and tests that start the frontend on port 0 (HTTP first:
  // a reader may stop at LISTENING).
  if ((*server)->http_port() != 0) std::printf("HTTP %d\n", (*server)->http_port());
  std::printf("LISTENING %d\n", (*server)->port());
  std::fflush(stdout);

  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    spdlog::info("SIGHUP: forming the worker group again if it is not formed");
    (*server)->group().RetryNow();
  }
  spdlog::info("signal {}: draining for up to {} s", sig, options.drain_seconds);
  (*server)->Drain(std::chrono::duration<double>(options.drain_seconds));
  spdlog::info("ditserve-frontend stopped");
  return 0;
}

}  // namespace
}  // namespace ditserve::server

int main(int argc, char** argv) { return ditserve::server::Run(argc, argv); }
