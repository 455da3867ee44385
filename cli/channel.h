// Connection plumbing shared by every ditserve-cli subcommand: the flags that say where the server
// is and how long to wait, the channel (raised receive limit, keepalive), per-call contexts with a
// deadline, and the one way errors are printed.
//
// Threads: everything here is used from main() only.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/flags.h"

namespace ditserve::cli {

// Raw float32 output of a 2048x2048 image is 48 MiB: well over gRPC's 4 MiB default.
inline constexpr int kMaxReceiveBytes = 64 << 20;
// ditserve-frontend accepts client pings no more often than every 10 s (its
// GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, server/frontend_server.cc; gRPC's own
// server default is 5 minutes, and a client that pings faster is sent GOAWAY "too_many_pings");
// 30 s keeps a margin and still notices a dead server during a minutes-long generation.
inline constexpr int kKeepaliveTimeMs = 30000;
inline constexpr int kKeepaliveTimeoutMs = 10000;

// Exit statuses shared by all subcommands (scripts and docker healthchecks rely on them).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the RPC failed, the server is not SERVING, output failed
inline constexpr int kExitUsage = 2;    // bad command line or unreadable input, nothing was sent

struct ConnectionFlags {
  std::string server = "127.0.0.1:50051";
  double timeout_seconds = 600;  // each subcommand sets its own default before binding
  bool wait_for_ready = false;
  bool tls = false;             // TLS with the system's trusted roots
  std::string tls_ca_file;      // TLS trusting these PEM roots (implies tls)
  std::string tls_server_name;  // the name the certificate must carry, when not the --server host
  std::string token_file;       // bearer token sent as "authorization: Bearer ..."
  // Loaded by ValidateConnectionFlags.
  std::string ca_pem;
  std::string token;
};

// Default flags with another default --timeout (for the options struct's initializer).
inline ConnectionFlags WithTimeout(double seconds) {
  ConnectionFlags flags;
  flags.timeout_seconds = seconds;
  return flags;
}

// Binds --server, --timeout, --wait-for-ready, --tls, --tls-ca, --tls-server-name and --token-file
// to `flags` (defaults are the current values). The token may also come from $DITSERVE_API_TOKEN.
void BindConnectionFlags(FlagParser* parser, ConnectionFlags* flags);

// Checks the flags (non-empty server, positive finite timeout) and reads the CA and token files.
absl::Status ValidateConnectionFlags(ConnectionFlags* flags);

// A channel to flags.server with the limits above: TLS when asked for, else insecure.
std::shared_ptr<grpc::Channel> MakeChannel(const ConnectionFlags& flags);

// Sets the deadline (now + timeout), wait-for-ready and the bearer token on a fresh context.
void ConfigureContext(const ConnectionFlags& flags, grpc::ClientContext* context);

// Prints "error: CODE_NAME: message" on stderr, CODE_NAME being the canonical status code name
// (for RPC failures the server's status code). Returns `exit_code` for `return PrintError(...)`.
int PrintError(const absl::Status& status, int exit_code);

// Parses argv[first..) into `parser`. Sets `*done` when the subcommand should exit right away
// (after --help, printed on stdout, or a bad command line, printed on stderr) and then returns its
// exit code; otherwise returns kExitOk. Positional arguments are rejected.
int ParseFlags(FlagParser* parser, int argc, const char* const* argv, int first, bool* done);

}  // namespace ditserve::cli
