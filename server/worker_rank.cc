#include "server/worker_rank.h"

#include <utility>

namespace ditserve::server {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

WorkerRank::WorkerRank(std::string address, std::unique_ptr<WorkerProcess> process)
    : address_(std::move(address)),
      process_(std::move(process)),
      channel_(MakeChannel(address_)),
      stub_(worker::v1::Worker::NewStub(channel_)) {
  thread_ = std::thread([this] { Serve(); });
}

WorkerRank::~WorkerRank() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool WorkerRank::WaitForConnected(std::chrono::system_clock::time_point deadline) const {
  return channel_->WaitForConnected(deadline);
}

void WorkerRank::Post(std::function<void()> call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
  }
  cv_.notify_all();
}

void WorkerRank::Serve() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !calls_.empty(); });
    if (calls_.empty()) return;  // stopping, nothing left to run
    std::function<void()> call = std::move(calls_.front());
    calls_.pop_front();
    lock.unlock();
    call();
    call = nullptr;  // whatever the call holds goes before the next wait
    lock.lock();
  }
}

}  // namespace ditserve::server
