#include "tests/support/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {

std::string FrontendBinary() { return BinaryDir() + "/server/ditserve-frontend"; }

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& args) {
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  char log_tmpl[] = "/tmp/ditserve-frontend-log-XXXXXX";
  int log_fd = ::mkstemp(log_tmpl);
  if (log_fd < 0) return absl::InternalError("mkstemp failed");
  p->log_path_ = log_tmpl;
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");

  std::vector<std::string> argv = {FrontendBinary(), "--listen", "127.0.0.1:0",
                                   "--metrics-listen", "127.0.0.1:0"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(cargv[0], cargv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(log_fd);
  p->pid_ = pid;
  p->stdout_fd_ = out_pipe[0];

  std::string buffer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((p->port_ == 0 || p->metrics_port_ == 0) && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{p->stdout_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    char chunk[256];
    ssize_t n = ::read(p->stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) break;
    buffer.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (line.rfind("LISTENING ", 0) == 0) p->port_ = std::atoi(line.c_str() + 10);
      if (line.rfind("METRICS ", 0) == 0) p->metrics_port_ = std::atoi(line.c_str() + 8);
    }
  }
  if (p->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("the frontend did not report its port; log: ", p->log_path_));
  }
  return p;
}

std::shared_ptr<grpc::Channel> ServerProcess::Channel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), args);
}

std::string ServerProcess::Health() const {
  auto stub = grpc::health::v1::Health::NewStub(Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return "error: " + s.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

bool ServerProcess::WaitUntilServing(std::chrono::seconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Health() == "SERVING") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

int ServerProcess::Stop(std::chrono::seconds grace) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

ServerProcess::~ServerProcess() {
  Stop(std::chrono::seconds(10));
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
}

}  // namespace ditserve::testing
