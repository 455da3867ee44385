#include "tests/support/server_process.h"

#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {
namespace {

// The frontend binary in the build tree.
std::string FrontendBinary() { return BinaryDir() + "/server/ditserve-frontend"; }

}  // namespace

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& args) {
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  char log_tmpl[] = "/tmp/ditserve-frontend-log-XXXXXX";
  const int log_fd = ::mkstemp(log_tmpl);
  if (log_fd < 0) return absl::InternalError("mkstemp failed");
  ::close(log_fd);
  p->log_path_ = log_tmpl;

  SpawnOptions o({FrontendBinary(), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"});
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.stdout_to = Redirect::Pipe();
  o.stderr_to = Redirect::File(p->log_path_);
  ASSIGN_OR_RETURN(p->process_, Subprocess::Spawn(o));
  const int stdout_fd = p->process_.stdout_fd();

  std::string buffer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((p->port_ == 0 || p->metrics_port_ == 0) && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{stdout_fd, POLLIN, 0};
    if (::poll(&pfd, 1, 200) <= 0) continue;
    char chunk[256];
    ssize_t n = ::read(stdout_fd, chunk, sizeof(chunk));
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

std::map<int, pid_t> ServerProcess::WorkerPids() const {
  std::map<int, pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid != process_.pid() || state == 'Z' || state == 'X') continue;
    std::ifstream cmd(entry.path() / "cmdline", std::ios::binary);
    std::vector<std::string> argv;
    for (std::string arg; std::getline(cmd, arg, '\0');) argv.push_back(arg);
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "--rank") out[std::atoi(argv[i + 1].c_str())] = static_cast<pid_t>(std::stol(name));
    }
  }
  return out;
}

int ServerProcess::Stop(std::chrono::seconds grace) {
  if (!process_.running()) return -1;
  const ExitStatus st = process_.Terminate(grace);
  return st.exited() ? st.exit_code() : -1;
}

ServerProcess::~ServerProcess() { Stop(std::chrono::seconds(10)); }

ServerProcess* ServerPool::Get(const std::vector<std::string>& args,
                               std::chrono::seconds serving_timeout) {
  const std::string key = absl::StrJoin(args, " ");
  auto it = servers_.find(key);
  if (it != servers_.end()) return it->second.get();
  auto started = ServerProcess::Start(args);
  EXPECT_TRUE(started.ok()) << key << ": " << started.status();
  if (!started.ok()) return nullptr;
  ServerProcess* server = started->get();
  servers_[key] = std::move(*started);
  EXPECT_TRUE(server->WaitUntilServing(serving_timeout))
      << key << ": never became SERVING; log: " << server->log_path();
  return server;
}

void ServerPool::TearDown() {
  for (auto& [key, server] : servers_) {
    EXPECT_EQ(server->Stop(), 0) << key << " log: " << server->log_path();
  }
  servers_.clear();
}

}  // namespace ditserve::testing
