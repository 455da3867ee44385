// ditserve-worker: one rank of the tensor-parallel group (one process per device).
#include <signal.h>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/logging.h"
#include "worker/engine.h"
#include "worker/worker_options.h"
#include "worker/worker_service.h"

namespace ditserve::worker {
namespace {

int Run(int argc, char** argv) {
  WorkerOptions options;
  FlagParser parser("ditserve-worker", "one rank of the ditserve tensor-parallel group");
  BindWorkerFlags(parser, options);
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ditserve-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (parser.HelpRequested()) {
    std::fputs(parser.Help().c_str(), stdout);
    return 0;
  }
  options.log.name = absl::StrCat("worker-", options.rank);
  if (absl::Status s = ValidateWorkerOptions(options); !s.ok()) {
    std::fprintf(stderr, "ditserve-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = SetupLogging(options.log); !s.ok()) {
    std::fprintf(stderr, "ditserve-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);  // internal: Shutdown RPC
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Engine engine(options);
  const pthread_t main_thread = pthread_self();
  WorkerService service(&engine, [main_thread] { pthread_kill(main_thread, SIGUSR1); });

  // Health for container healthchecks: SERVING once the process listens (readiness of the group
  // is the frontend's business).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", options.listen);
    return 1;
  }
  spdlog::info("ditserve-worker listening on port {}", port);
  if (!options.port_file.empty()) {
    std::string tmp = options.port_file + ".tmp";
    { std::ofstream(tmp) << port << "\n"; }
    std::rename(tmp.c_str(), options.port_file.c_str());
  }

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("worker stopping (signal {})", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Wait();
  return 0;
}

}  // namespace
}  // namespace ditserve::worker

int main(int argc, char** argv) { return ditserve::worker::Run(argc, argv); }
