// What guards the public APIs (gRPC and HTTP) when the operator asks for it: TLS (--tls-cert,
// --tls-key: PEM files) and a bearer token (--api-token-file: a file holding one token, so that it
// never shows in `ps`). Health (grpc.health.v1) and /metrics stay open: probes and scrapers carry no
// token, and the metrics endpoint should be bound to a private address.
//
// Threads: an ApiSecurity is immutable after Load; Check may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::server {

struct SecurityOptions {
  std::string tls_cert_file;   // PEM certificate chain; with tls_key_file, or neither
  std::string tls_key_file;    // PEM private key
  std::string api_token_file;  // empty: no token asked for
};

// Both TLS files or neither; names the flag that is missing.
absl::Status ValidateSecurityOptions(const SecurityOptions& options);

class ApiSecurity {
 public:
  // Reads the files the options name. Errors name the file and what is wrong with it (unreadable,
  // empty, not PEM, a token with whitespace or control characters inside or over 4096 bytes).
  static absl::StatusOr<std::shared_ptr<const ApiSecurity>> Load(const SecurityOptions& options);

  bool tls() const { return !cert_pem_.empty(); }
  bool token_required() const { return !token_.empty(); }
  const std::string& cert_file() const { return cert_file_; }
  const std::string& key_file() const { return key_file_; }

  // The gRPC listening credentials: SSL with the loaded pair, else insecure.
  std::shared_ptr<grpc::ServerCredentials> GrpcCredentials() const;

  // `authorization` is the request's Authorization header / "authorization" metadata value, empty
  // when absent. OK when no token is required or it is "Bearer <token>" with the right token
  // (compared in constant time); UNAUTHENTICATED otherwise, saying which of the two it was.
  absl::Status Check(absl::string_view authorization) const;

 private:
  std::string cert_file_, key_file_, cert_pem_, key_pem_, token_;
};

}  // namespace ditserve::server
