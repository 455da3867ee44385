#include "server/api_security.h"

#include <fstream>
#include <sstream>

#include <grpcpp/security/server_credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ditserve::server {
namespace {

constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, const char* flag, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::string data;
  data.resize(limit + 1);
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  if (data.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", path, "' is larger than ", limit, " bytes"));
  }
  return data;
}

}  // namespace

absl::Status ValidateSecurityOptions(const SecurityOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError(o.tls_cert_file.empty()
                                          ? "--tls-key needs --tls-cert (the certificate chain)"
                                          : "--tls-cert needs --tls-key (the private key)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ApiSecurity>> ApiSecurity::Load(const SecurityOptions& o) {
  if (absl::Status s = ValidateSecurityOptions(o); !s.ok()) return s;
  auto sec = std::make_shared<ApiSecurity>();
  if (!o.tls_cert_file.empty()) {
    auto cert = ReadSmallFile(o.tls_cert_file, "--tls-cert", kMaxPemBytes);
    if (!cert.ok()) return cert.status();
    auto key = ReadSmallFile(o.tls_key_file, "--tls-key", kMaxPemBytes);
    if (!key.ok()) return key.status();
    if (!absl::StrContains(*cert, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-cert: '", o.tls_cert_file, "' holds no PEM certificate"));
    }
    if (!absl::StrContains(*key, "PRIVATE KEY-----")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-key: '", o.tls_key_file, "' holds no PEM private key"));
    }
    sec->cert_file_ = o.tls_cert_file;
    sec->key_file_ = o.tls_key_file;
    sec->cert_pem_ = *std::move(cert);
    sec->key_pem_ = *std::move(key);
  }
  if (!o.api_token_file.empty()) {
    auto raw = ReadSmallFile(o.api_token_file, "--api-token-file", kMaxTokenBytes + 2);
    if (!raw.ok()) return raw.status();
    absl::string_view token = *raw;
    // One trailing newline (echo TOKEN > file) is not part of the token.
    absl::ConsumeSuffix(&token, "\n");
    absl::ConsumeSuffix(&token, "\r");
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--api-token-file: '", o.api_token_file, "' is empty"));
    }
    if (token.size() > kMaxTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat("--api-token-file: the token in '",
                                                     o.api_token_file, "' is longer than ",
                                                     kMaxTokenBytes, " bytes"));
    }
    for (char c : token) {
      if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--api-token-file: the token in '", o.api_token_file,
            "' must be printable ASCII without spaces (it travels in an Authorization header)"));
      }
    }
    sec->token_ = std::string(token);
  }
  return std::shared_ptr<const ApiSecurity>(std::move(sec));
}

std::shared_ptr<grpc::ServerCredentials> ApiSecurity::GrpcCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key_pem_, cert_pem_});
  return grpc::SslServerCredentials(ssl);
}

absl::Status ApiSecurity::Check(absl::string_view authorization) const {
  if (token_.empty()) return absl::OkStatus();
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "this server requires a bearer token: send 'authorization: Bearer <token>'");
  }
  absl::string_view presented = authorization;
  if (!absl::ConsumePrefix(&presented, "Bearer ") && !absl::ConsumePrefix(&presented, "bearer ")) {
    return absl::UnauthenticatedError("the authorization value must be 'Bearer <token>'");
  }
  // Constant time in the token's length: every byte is compared whatever the first mismatch.
  unsigned char diff = presented.size() == token_.size() ? 0 : 1;
  for (size_t i = 0; i < token_.size(); ++i) {
    const unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(p ^ static_cast<unsigned char>(token_[i]));
  }
  if (diff != 0) return absl::UnauthenticatedError("the bearer token is not valid");
  return absl::OkStatus();
}

}  // namespace ditserve::server
