// ditserve-cli health: grpc.health.v1.Health/Check. Prints the status name (SERVING, NOT_SERVING,
// SERVICE_UNKNOWN, UNKNOWN) on stdout and exits 0 only for SERVING, so it can be a docker
// healthcheck as is. An unknown --service is NOT_FOUND from the server: an error, exit 1.
#include <cstdio>

#include "cli/channel.h"
#include "cli/commands.h"
#include "common/flags.h"
#include "common/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ditserve::cli {
namespace {

using grpc::health::v1::HealthCheckResponse;

struct HealthOptions {
  // Short default: a healthcheck that hangs is worse than one that fails.
  ConnectionFlags connection = WithTimeout(5);
  std::string service;  // "" = the server as a whole
};

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

  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(o.connection));
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
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitFailure;
}

}  // namespace ditserve::cli
