#include "cli/channel.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace ditserve::cli {

void BindConnectionFlags(FlagParser* parser, ConnectionFlags* flags) {
  parser->AddString("server", &flags->server, "HOST:PORT of the ditserve frontend");
  parser->AddDouble("timeout", &flags->timeout_seconds, "deadline of the call, in seconds");
  parser->AddBool("wait-for-ready", &flags->wait_for_ready,
                  "wait (until the deadline) for the server to come up instead of failing fast");
}

absl::Status ValidateConnectionFlags(const ConnectionFlags& flags) {
  if (flags.server.empty()) return absl::InvalidArgumentError("--server must not be empty");
  if (!std::isfinite(flags.timeout_seconds) || flags.timeout_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout must be a positive number of seconds, got ", flags.timeout_seconds));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  // A unary generation sends no data for a long time; keep pinging anyway.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(flags.server, grpc::InsecureChannelCredentials(), args);
}

void ConfigureContext(const ConnectionFlags& flags, grpc::ClientContext* context) {
  auto timeout = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(flags.timeout_seconds));
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  context->set_wait_for_ready(flags.wait_for_ready);
}

int PrintError(const absl::Status& status, int exit_code) {
  std::string line = absl::StrCat("error: ", absl::StatusCodeToString(status.code()), ": ",
                                  status.message(), "\n");
  std::fputs(line.c_str(), stderr);
  return exit_code;
}

int ParseFlags(FlagParser* parser, int argc, const char* const* argv, int first, bool* done) {
  *done = false;
  if (absl::Status s = parser->Parse(argc, argv, first); !s.ok()) {
    *done = true;
    return PrintError(s, kExitUsage);
  }
  if (parser->HelpRequested()) {
    std::fputs(parser->Help().c_str(), stdout);
    *done = true;
    return kExitOk;
  }
  if (!parser->Positional().empty()) {
    *done = true;
    return PrintError(absl::InvalidArgumentError(absl::StrCat(
                          "unexpected argument '", parser->Positional().front(), "'")),
                      kExitUsage);
  }
  return kExitOk;
}

}  // namespace ditserve::cli
