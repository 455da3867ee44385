// ditserve-cli health: grpc.health.v1.Health/Check. Prints the status name (SERVING, NOT_SERVING,
// SERVICE_UNKNOWN, UNKNOWN) on stdout and exits 0 only for SERVING, so it can be a docker
// healthcheck as is. An unknown --service is NOT_FOUND from the server: an error, exit 1.
// NOT_SERVING with a known reason (GetModelInfo's not_serving_reason: the worker group could not be
// formed) adds one "reason: ..." line on stderr; stdout stays the status name alone.
#include <cstdio>
#include <memory>

#include "cli/channel.h"
#include "cli/commands.h"
#include "common/flags.h"
#include "common/grpc_status.h"
#include "ditserve/v1/ditserve.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ditserve::cli {
namespace {

using grpc::health::v1::HealthCheckResponse;

struct HealthOptions {
  // Short default: a healthcheck that hangs is worse than one that fails.
  ConnectionFlags connection = WithTimeout(5);
  std::string service;  // "" = the server as a whole
};

// Prints why the server is not serving, when it says (best effort: nothing when it does not).
void PrintNotServingReason(const std::shared_ptr<grpc::Channel>& channel,
                           const ConnectionFlags& connection) {
  auto stub = ditserve::v1::ImageGeneration::NewStub(channel);
  grpc::ClientContext context;
  ConfigureContext(connection, &context);
  ditserve::v1::ModelInfo info;
  if (!stub->GetModelInfo(&context, ditserve::v1::GetModelInfoRequest(), &info).ok() ||
      !info.has_not_serving_reason()) {
    return;
  }
  const ditserve::v1::NotServingReason& reason = info.not_serving_reason();
  std::fprintf(stderr, "reason: %s: %s (%s, %llu failed attempt(s))\n", reason.code().c_str(),
               reason.message().c_str(),
               reason.permanent() ? "permanent: retried every few minutes or on SIGHUP"
                                  : "retried within seconds",
               static_cast<unsigned long long>(reason.attempts()));
}

}  // namespace

int RunHealth(int argc, const char* const* argv, int first) {
  HealthOptions o;
  FlagParser parser("ditserve-cli health",
                    "Prints the gRPC health status; exits 0 only when SERVING.");
  BindConnectionFlags(&parser, &o.connection);
  parser.AddString("service", &o.service, "service name to check; empty = overall status");
  bool done = false;
  int code = ParseFlags(&parser, argc, argv, first, &done);
  if (done) return code;
  if (absl::Status s = ValidateConnectionFlags(&o.connection); !s.ok()) {
    return PrintError(s, kExitUsage);
  }

  const std::shared_ptr<grpc::Channel> channel = MakeChannel(o.connection);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  ConfigureContext(o.connection, &context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(o.service);
  HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return PrintError(FromGrpcStatus(status), kExitFailure);

  std::string name = HealthCheckResponse::ServingStatus_Name(response.status());
  if (name.empty()) name = "UNKNOWN";
  std::printf("%s\n", name.c_str());
  std::fflush(stdout);
  if (response.status() == HealthCheckResponse::NOT_SERVING) PrintNotServingReason(channel, o.connection);
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitFailure;
}

}  // namespace ditserve::cli
