#include "cli/channel.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/grpc_status.h"

namespace ditserve::cli {

void BindConnectionFlags(FlagParser* parser, ConnectionFlags* flags) {
  parser->AddString("server", &flags->server, "HOST:PORT of the ditserve frontend");
  parser->AddDouble("timeout", &flags->timeout_seconds, "deadline of the call, in seconds");
  parser->AddBool("wait-for-ready", &flags->wait_for_ready,
                  "wait (until the deadline) for the server to come up instead of failing fast");
  parser->AddBool("tls", &flags->tls, "connect over TLS, trusting the system's roots");
  parser->AddString("tls-ca", &flags->tls_ca_file, "connect over TLS, trusting this PEM CA file");
  parser->AddString("tls-server-name", &flags->tls_server_name,
                    "the name the server's certificate must carry (default: the --server host)");
  parser->AddString("token-file", &flags->token_file,
                    "file holding the server's bearer token (default: $DITSERVE_API_TOKEN)");
}

namespace {

absl::StatusOr<std::string> ReadFileFlag(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

}  // namespace

absl::Status ValidateConnectionFlags(ConnectionFlags* flags) {
  if (flags->server.empty()) return absl::InvalidArgumentError("--server must not be empty");
  if (!std::isfinite(flags->timeout_seconds) || flags->timeout_seconds <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--timeout must be a positive number of seconds, got ", flags->timeout_seconds));
  }
  if (!flags->tls_ca_file.empty()) {
    auto pem = ReadFileFlag(flags->tls_ca_file, "--tls-ca");
    if (!pem.ok()) return pem.status();
    flags->ca_pem = *std::move(pem);
    flags->tls = true;
  }
  if (!flags->tls_server_name.empty() && !flags->tls) {
    return absl::InvalidArgumentError("--tls-server-name needs --tls or --tls-ca");
  }
  if (!flags->token_file.empty()) {
    auto token = ReadFileFlag(flags->token_file, "--token-file");
    if (!token.ok()) return token.status();
    flags->token = *std::move(token);
  } else if (const char* env = std::getenv("DITSERVE_API_TOKEN"); env != nullptr) {
    flags->token = env;
  }
  absl::string_view token = flags->token;
  absl::ConsumeSuffix(&token, "\n");
  absl::ConsumeSuffix(&token, "\r");
  flags->token = std::string(token);
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  // A unary generation sends no data for a long time; keep pinging anyway.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (!flags.tls) return grpc::CreateCustomChannel(flags.server, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = flags.ca_pem;  // empty: the system's roots
  if (!flags.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(flags.tls_server_name);
  }
  return grpc::CreateCustomChannel(flags.server, grpc::SslCredentials(ssl), args);
}

void ConfigureContext(const ConnectionFlags& flags, grpc::ClientContext* context) {
  auto timeout = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(flags.timeout_seconds));
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  context->set_wait_for_ready(flags.wait_for_ready);
  if (!flags.token.empty()) context->AddMetadata("authorization", "Bearer " + flags.token);
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
