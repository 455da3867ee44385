// ditserve-frontend: the public gRPC API in front of a tensor-parallel worker group.
#include <signal.h>
#include <unistd.h>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/logging.h"
#include "server/admission_queue.h"
#include "server/dispatcher.h"
#include "server/frontend_metrics.h"
#include "server/frontend_options.h"
#include "server/image_generation_service.h"
#include "server/worker_group.h"

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

  // Block the shutdown signals in every thread; a dedicated thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  WorkerGroupOptions group_options;
  group_options.remote_addresses = options.WorkerAddresses();
  group_options.spawn_count = static_cast<uint32_t>(options.spawn_workers);
  group_options.worker_binary =
      options.worker_binary.empty() ? DefaultWorkerBinary() : options.worker_binary;
  group_options.worker_host = options.worker_host;
  group_options.worker_extra_args = {"--log-level", options.log.level, "--log-format",
                                     options.log.format};
  group_options.init_template.set_model_dir(options.model_dir);
  group_options.init_template.set_device(options.device);
  group_options.init_template.set_dtype(options.dtype);
  group_options.init_template.set_staging_buffer_bytes(options.staging_buffer_mib << 20);
  group_options.init_template.set_collective_timeout_ms(
      static_cast<uint32_t>(options.collective_timeout_ms));
  group_options.init_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options.init_timeout_seconds * 1000));
  group_options.collective_timeout = std::chrono::milliseconds(options.collective_timeout_ms);

  WorkerGroup group(group_options);
  AdmissionQueue queue(options.max_queue);
  FrontendMetrics metrics(&options, &queue, &group);
  queue.SetDropObserver(metrics.dispatch_observer().on_dropped);
  Dispatcher dispatcher(&queue, &group, options.max_batch, metrics.dispatch_observer());
  ImageGenerationService service(&options, &queue, &group, metrics.request_observer());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(64 << 20);  // precomputed embeddings can be a few MiB
  builder.SetMaxSendMessageSize(256 << 20);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot listen on {}", options.listen);
    return 1;
  }
  auto* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus("ditserve.v1.ImageGeneration", false);
  group.SetReadinessListener([health](bool ready) {
    health->SetServingStatus(ready);
    health->SetServingStatus("ditserve.v1.ImageGeneration", ready);
  });
  if (absl::Status s = metrics.Start(options.metrics_listen); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  spdlog::info("ditserve-frontend {} listening on port {} (model {}, tp={})", DITSERVE_VERSION,
               port, options.model_dir, options.WorldSize());
  // Machine-readable line for scripts and tests that start the frontend on port 0.
  std::printf("LISTENING %d\n", port);
  std::fflush(stdout);

  group.Start();
  dispatcher.Start();

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining for up to {} s", sig, options.drain_seconds);
  health->SetServingStatus(false);
  health->SetServingStatus("ditserve.v1.ImageGeneration", false);
  service.StartDraining();
  const auto drain_deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(options.drain_seconds * 1000));
  while (std::chrono::steady_clock::now() < drain_deadline &&
         (service.in_flight() > 0 || queue.size() > 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  queue.Close(absl::UnavailableError("server is shutting down"));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  group.Shutdown();  // also ends a running job: its RPCs fail
  dispatcher.Join();
  metrics.Stop();
  server->Wait();
  spdlog::info("ditserve-frontend stopped");
  return 0;
}

}  // namespace
}  // namespace ditserve::server

int main(int argc, char** argv) { return ditserve::server::Run(argc, argv); }
