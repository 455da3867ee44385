// TLS and the bearer token through the real binaries: ditserve-frontend with --tls-cert/--tls-key
// (a self-signed certificate made here with the openssl command) and --api-token-file, spawning 2
// CPU workers on the flux1-tiny fixture, driven by ditserve-cli. Health stays open (probes carry no
// token); every API call needs TLS and the token; bad security flags and files stop the frontend
// with a message naming the flag and the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/remove_tree.h"
#include "tests/support/cli_subprocess.h"
#include "tests/support/fixture_requests.h"
#include "tests/support/fixtures.h"
#include "tests/support/reference_png.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

constexpr char kToken[] = "s3cret-token_for.tests";

std::string Dir() {
  return ::testing::TempDir() + "ditserve-security-e2e-" + std::to_string(::getpid());
}
std::string Cli() { return BinaryDir() + "/cli/ditserve-cli"; }
std::string Frontend() { return BinaryDir() + "/server/ditserve-frontend"; }

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

class SecurityE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!ProgramExists("openssl")) return;  // each test skips, saying why
    std::filesystem::create_directories(Dir());
    const ProcessResult cert = RunSystemProgram(
        {"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout",
         Dir() + "/key.pem", "-out", Dir() + "/cert.pem"},
        60);
    ASSERT_EQ(cert.exit_code, 0) << cert.err;
    WriteFile(Dir() + "/token", std::string(kToken) + "\n");
    WriteFile(Dir() + "/wrong-token", "not-the-token\n");
    auto server = ServerProcess::Start(
        {"--model", FixturesDir() + "/flux1-tiny", "--spawn-workers", "2", "--tls-cert",
         Dir() + "/cert.pem", "--tls-key", Dir() + "/key.pem", "--api-token-file", Dir() + "/token",
         "--metrics-tls"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    // Health over TLS, with no token.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    while (std::chrono::steady_clock::now() < until) {
      if (RunProcess(HealthArgs(), {}, 30).exit_code == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    FAIL() << "never SERVING over TLS; log: " << server_->log_path();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    (void)ditserve::RemoveTree(Dir());
  }
  void SetUp() override {
    if (!ProgramExists("openssl")) GTEST_SKIP() << "the openssl command is not installed";
    ASSERT_NE(server_, nullptr);
  }
  static std::vector<std::string> HealthArgs() {
    return {Cli(), "health", "--server", server_->address(), "--tls-ca", Dir() + "/cert.pem",
            "--tls-server-name", "localhost", "--timeout", "5"};
  }
  // `ditserve-cli generate` of the fixture call with extra connection flags.
  static ProcessResult Generate(std::vector<std::string> connection, const std::string& out,
                                const std::vector<std::string>& env = {}) {
    const nlohmann::json c = Flux1CallArgs();
    std::vector<std::string> argv = {Cli(), "generate", "--server", server_->address(),
                                      "--prompt", c["prompt"].get<std::string>(), "--height", "32",
                                      "--width", "32", "--steps", "4", "--seed", "42", "--guidance",
                                      "3.5", "--max-sequence-length", "32", "-o", out, "--timeout", "120"};
    argv.insert(argv.end(), connection.begin(), connection.end());
    return RunProcess(argv, env, 180);
  }
  static std::vector<std::string> Tls() {
    return {"--tls-ca", Dir() + "/cert.pem", "--tls-server-name", "localhost"};
  }

  static ServerProcess* server_;
};

ServerProcess* SecurityE2E::server_ = nullptr;

TEST_F(SecurityE2E, TlsAndTheTokenGiveTheReferenceImage) {
  std::vector<std::string> flags = Tls();
  flags.insert(flags.end(), {"--token-file", Dir() + "/token"});
  const std::string out = Dir() + "/ok.png";
  const ProcessResult r = Generate(flags, out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out, std::ios::binary);
  ExpectPngMatchesReference(std::string(std::istreambuf_iterator<char>(in), {}));
}

TEST_F(SecurityE2E, TheTokenMayComeFromTheEnvironment) {
  const ProcessResult r = Generate(Tls(), Dir() + "/env.png", {std::string("DITSERVE_API_TOKEN=") + kToken});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(SecurityE2E, MissingOrWrongTokenIsUnauthenticated) {
  ProcessResult r = Generate(Tls(), Dir() + "/none.png");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("requires a bearer token"), std::string::npos) << r.err;

  std::vector<std::string> wrong = Tls();
  wrong.insert(wrong.end(), {"--token-file", Dir() + "/wrong-token"});
  r = Generate(wrong, Dir() + "/wrong.png");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not valid"), std::string::npos) << r.err;

  // ModelInfo is guarded too.
  r = RunProcess({Cli(), "info", "--server", server_->address(), "--tls-ca", Dir() + "/cert.pem",
                  "--tls-server-name", "localhost"},
                 {}, 60);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
}

TEST_F(SecurityE2E, PlaintextClientsCannotTalkToTheTlsServer) {
  const ProcessResult r = Generate({"--token-file", Dir() + "/token"}, Dir() + "/plain.png");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

TEST_F(SecurityE2E, AnUntrustedCertificateIsRefusedByTheClient) {
  // The client trusts another CA: the handshake fails, nothing is sent.
  const std::string other = Dir() + "/other";
  std::filesystem::create_directories(other);
  ASSERT_EQ(RunSystemProgram(
                {"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                 "/CN=localhost", "-keyout", other + "/key.pem", "-out", other + "/cert.pem"},
                60)
                .exit_code,
            0);
  const ProcessResult r =
      Generate({"--tls-ca", other + "/cert.pem", "--tls-server-name", "localhost", "--token-file",
                Dir() + "/token"},
               Dir() + "/untrusted.png");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
}

TEST_F(SecurityE2E, PythonClientSpeaksTlsWithTheToken) {
  if (!ProgramExists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const nlohmann::json c = Flux1CallArgs();
  const std::string client = std::string(DITSERVE_SOURCE_DIR) + "/deploy/clients/python/ditserve_client.py";
  auto run = [&](const std::string& token_file, const std::string& out) {
    std::vector<std::string> argv = {
        "/usr/bin/python3", client, "--stubs", BinaryDir() + "/python", "generate", "--server",
        server_->address(), "--tls-ca", Dir() + "/cert.pem", "--tls-server-name", "localhost",
        "--prompt", c["prompt"].get<std::string>(), "--height", "32", "--width", "32", "--steps", "4",
        "--seed", "42", "--guidance", "3.5", "--max-sequence-length", "32", "-o", out};
    if (!token_file.empty()) argv.insert(argv.end(), {"--token-file", token_file});
    return RunProcess(argv, {}, 180);
  };
  ProcessResult r = run(Dir() + "/token", Dir() + "/py.png");
  if (r.exit_code != 0 && r.err.find("No module named 'grpc'") != std::string::npos) {
    GTEST_SKIP() << "python3-grpcio is not installed";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(Dir() + "/py.png", std::ios::binary);
  ExpectPngMatchesReference(std::string(std::istreambuf_iterator<char>(in), {}));
  r = run("", Dir() + "/py-none.png");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
}

TEST_F(SecurityE2E, MetricsAreServedOverHttps) {
  if (!ProgramExists("/usr/bin/curl")) GTEST_SKIP() << "curl is not installed";
  const std::string port = std::to_string(server_->metrics_port());
  ProcessResult r = RunSystemProgram({"/usr/bin/curl", "-sS", "--cacert", Dir() + "/cert.pem",
                                      "https://localhost:" + port + "/metrics"},
                                     30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ditserve_worker_ready"), std::string::npos) << r.out.substr(0, 400);
  r = RunSystemProgram({"/usr/bin/curl", "-sS", "http://127.0.0.1:" + port + "/metrics"}, 30);
  EXPECT_NE(r.exit_code, 0) << "plain HTTP was answered: " << r.out.substr(0, 200);
}

TEST_F(SecurityE2E, BadSecurityFlagsStopTheFrontendWithAMessage) {
  struct Case {
    std::vector<std::string> flags;
    int exit_code;
    std::string message;
  };
  WriteFile(Dir() + "/empty-token", "\n");
  WriteFile(Dir() + "/spaced-token", "two words\n");
  WriteFile(Dir() + "/not-a-cert.pem", "hello\n");
  const std::vector<Case> cases = {
      {{"--tls-cert", Dir() + "/cert.pem"}, 2, "--tls-cert needs --tls-key"},
      {{"--tls-key", Dir() + "/key.pem"}, 2, "--tls-key needs --tls-cert"},
      {{"--tls-cert", Dir() + "/missing.pem", "--tls-key", Dir() + "/key.pem"}, 1,
       "--tls-cert: cannot read '" + Dir() + "/missing.pem'"},
      {{"--tls-cert", Dir() + "/not-a-cert.pem", "--tls-key", Dir() + "/key.pem"}, 1,
       "holds no PEM certificate"},
      {{"--api-token-file", Dir() + "/empty-token"}, 1, "is empty"},
      {{"--api-token-file", Dir() + "/spaced-token"}, 1, "printable ASCII without spaces"},
      {{"--metrics-tls"}, 2, "--metrics-tls needs --tls-cert and --tls-key"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {Frontend(), "--model", FixturesDir() + "/flux1-tiny",
                                     "--listen", "127.0.0.1:0", "--metrics-listen", ""};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const ProcessResult r = RunProcess(argv, {}, 60);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.flags[0] << ": " << r.err;
  }
}

}  // namespace
}  // namespace ditserve::testing
