#include "server/worker_group.h"

#include <condition_variable>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace ditserve::server {
namespace {

using worker::v1::InitEvent;
using worker::v1::RunEvent;

std::chrono::system_clock::time_point After(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

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

WorkerGroup::WorkerGroup(WorkerGroupOptions options) : options_(std::move(options)) {}

WorkerGroup::~WorkerGroup() { Shutdown(); }

uint32_t WorkerGroup::world_size() const {
  return options_.remote_addresses.empty()
             ? options_.spawn_count
             : static_cast<uint32_t>(options_.remote_addresses.size());
}

void WorkerGroup::Start() { control_ = std::thread([this] { ControlLoop(); }); }

void WorkerGroup::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !control_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (control_.joinable()) control_.join();
  SetReady(false);
  std::vector<std::shared_ptr<Rank>> ranks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks.swap(ranks_);
  }
  for (auto& r : ranks) {
    if (r->process && r->stub) {
      grpc::ClientContext ctx;
      ctx.set_deadline(After(std::chrono::milliseconds(2000)));
      worker::v1::ShutdownResponse resp;
      r->stub->Shutdown(&ctx, worker::v1::ShutdownRequest(), &resp);
    }
  }
  for (auto& r : ranks) {
    if (r->process) r->process->Stop();
  }
}

std::optional<worker::v1::ModelDescription> WorkerGroup::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

void WorkerGroup::SetReadinessListener(std::function<void(bool)> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
}

void WorkerGroup::SetReady(bool ready) {
  std::function<void(bool)> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener = listener_;
  }
  if (ready_.exchange(ready) != ready && listener) listener(ready);
}

void WorkerGroup::MarkBroken(const std::string& why) {
  spdlog::error("worker group broken: {}", why);
  SetReady(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
  }
  cv_.notify_all();
}

void WorkerGroup::ControlLoop() {
  auto backoff = std::chrono::milliseconds(500);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_ || broken_; });
      if (stopping_) return;
      // Supervise spawned processes: any exit breaks the group.
      if (!broken_) {
        for (size_t i = 0; i < ranks_.size(); ++i) {
          if (ranks_[i]->process && !ranks_[i]->process->Alive()) {
            lock.unlock();
            MarkBroken(absl::StrCat("worker rank ", i, " (pid ", ranks_[i]->process->pid(),
                                    ") exited"));
            lock.lock();
            break;
          }
        }
      }
      if (!broken_) continue;
    }
    absl::Status s = Form();
    if (s.ok()) {
      backoff = std::chrono::milliseconds(500);
      continue;
    }
    spdlog::error("forming the worker group failed: {}; retrying in {} ms", s.ToString(),
                  backoff.count());
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, backoff, [&] { return stopping_; });
    backoff = std::min(backoff * 2, std::chrono::milliseconds(10000));
  }
}

absl::Status WorkerGroup::ConnectRanks() {
  const uint32_t n = world_size();
  std::vector<std::shared_ptr<Rank>> ranks;
  if (options_.remote_addresses.empty()) {
    // Spawned mode: always start a fresh set of processes, so no rank is left stuck inside a
    // collective of the previous group.
    {
      std::lock_guard<std::mutex> lock(mu_);
      ranks.swap(ranks_);
    }
    for (auto& r : ranks) {
      if (r->process) r->process->Stop(std::chrono::milliseconds(2000));
    }
    ranks.clear();
    for (uint32_t i = 0; i < n; ++i) {
      WorkerProcessOptions po;
      po.binary = options_.worker_binary;
      po.host = options_.worker_host;
      po.rank = static_cast<int>(i);
      po.extra_args = options_.worker_extra_args;
      auto proc = WorkerProcess::Start(po);
      if (!proc.ok()) return proc.status();
      auto rank = std::make_shared<Rank>();
      rank->address = (*proc)->address();
      rank->process = std::move(*proc);
      ranks.push_back(std::move(rank));
    }
  } else {
    for (const auto& address : options_.remote_addresses) {
      auto rank = std::make_shared<Rank>();
      rank->address = address;
      ranks.push_back(std::move(rank));
    }
  }
  for (auto& r : ranks) {
    r->channel = MakeChannel(r->address);
    r->stub = worker::v1::Worker::NewStub(r->channel);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!ranks[i]->channel->WaitForConnected(After(std::chrono::milliseconds(10000)))) {
      return absl::UnavailableError(
          absl::StrCat("worker rank ", i, " at ", ranks[i]->address, " is not reachable"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ranks_ = std::move(ranks);
  return absl::OkStatus();
}

absl::Status WorkerGroup::Form() {
  SetReady(false);
  if (absl::Status s = ConnectRanks(); !s.ok()) return s;
  std::vector<std::shared_ptr<Rank>> ranks;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks = ranks_;
    generation = ++group_counter_;
  }
  const uint32_t n = static_cast<uint32_t>(ranks.size());
  spdlog::info("forming worker group of {} rank(s) (generation {})", n, generation);

  worker::v1::Rendezvous rendezvous;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(After(std::chrono::milliseconds(30000)));
    worker::v1::GetRendezvousRequest req;
    req.set_world_size(n);
    grpc::Status s = ranks[0]->stub->GetRendezvous(&ctx, req, &rendezvous);
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("rank 0 GetRendezvous: ", s.error_message()));
    }
    rendezvous.set_world_size(n);
    rendezvous.set_group_id(absl::StrCat("g", generation, "-", ::getpid()));
  }

  std::vector<absl::Status> results(n);
  std::vector<worker::v1::ModelDescription> models(n);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(After(options_.init_timeout));
      worker::v1::InitRequest req = options_.init_template;
      req.set_rank(i);
      *req.mutable_rendezvous() = rendezvous;
      auto reader = ranks[i]->stub->Init(&ctx, req);
      InitEvent ev;
      bool ready = false;
      while (reader->Read(&ev)) {
        if (ev.phase() == "load" && ev.bytes_total() > 0) {
          spdlog::debug("rank {} loaded {}/{} bytes", i, ev.bytes_loaded(), ev.bytes_total());
        }
        if (ev.phase() == "ready") {
          ready = true;
          models[i] = ev.model();
        }
      }
      grpc::Status s = reader->Finish();
      if (!s.ok()) {
        results[i] = absl::Status(FromGrpcStatus(s).code(),
                                  absl::StrCat("rank ", i, " Init: ", s.error_message()));
      } else if (!ready) {
        results[i] = absl::InternalError(absl::StrCat("rank ", i, " Init ended before ready"));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : results) {
    if (!s.ok()) return s;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    model_ = models[0];
    broken_ = false;
  }
  formations_.fetch_add(1);
  spdlog::info("worker group ready: model '{}' ({}), tp={}, {} on {}", models[0].name(),
               models[0].family(), n, models[0].dtype(), models[0].device());
  SetReady(true);
  return absl::OkStatus();
}

absl::StatusOr<worker::v1::RunResult> WorkerGroup::Run(
    const worker::v1::RunRequest& request,
    const std::function<void(const worker::v1::StepProgress&)>& on_progress,
    const std::function<bool()>& should_cancel) {
  if (!ready()) return absl::UnavailableError("the worker group is not ready");
  std::vector<std::shared_ptr<Rank>> ranks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks = ranks_;
  }
  const size_t n = ranks.size();
  struct RankCall {
    grpc::ClientContext ctx;
    grpc::Status status;
    worker::v1::RunResult result;
    bool has_result = false;
  };
  std::vector<std::unique_ptr<RankCall>> calls(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t finished = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    calls[i] = std::make_unique<RankCall>();
    threads.emplace_back([&, i] {
      RankCall& call = *calls[i];
      auto reader = ranks[i]->stub->Run(&call.ctx, request);
      RunEvent ev;
      while (reader->Read(&ev)) {
        if (ev.has_progress() && i == 0 && on_progress) on_progress(ev.progress());
        if (ev.has_result()) {
          call.result = std::move(*ev.mutable_result());
          call.has_result = true;
        }
      }
      call.status = reader->Finish();
      {
        std::lock_guard<std::mutex> lock(mu);
        ++finished;
      }
      cv.notify_all();
    });
  }

  bool cancel_sent = false;
  std::optional<std::chrono::steady_clock::time_point> hard_deadline;
  {
    std::unique_lock<std::mutex> lock(mu);
    while (finished < n) {
      cv.wait_for(lock, std::chrono::milliseconds(20));
      if (finished == n) break;
      if (!cancel_sent && should_cancel && should_cancel()) {
        cancel_sent = true;
        lock.unlock();
        for (size_t i = 0; i < n; ++i) {
          grpc::ClientContext ctx;
          ctx.set_deadline(After(std::chrono::milliseconds(2000)));
          worker::v1::CancelRequest creq;
          creq.set_job_id(request.job_id());
          worker::v1::CancelResponse cresp;
          ranks[i]->stub->Cancel(&ctx, creq, &cresp);
        }
        // The ranks stop at the next step boundary; a step longer than the collective timeout
        // means the group is stuck.
        hard_deadline = std::chrono::steady_clock::now() + options_.collective_timeout +
                        std::chrono::milliseconds(5000);
        lock.lock();
      }
      if (hard_deadline && std::chrono::steady_clock::now() > *hard_deadline) {
        for (auto& c : calls) c->ctx.TryCancel();
      }
    }
  }
  for (auto& t : threads) t.join();

  bool all_ok = true;
  bool any_cancelled = false;
  std::string failure;
  grpc::StatusCode failure_code = grpc::StatusCode::OK;
  for (size_t i = 0; i < n; ++i) {
    const grpc::Status& s = calls[i]->status;
    if (s.ok()) continue;
    all_ok = false;
    if (s.error_code() == grpc::StatusCode::CANCELLED) {
      any_cancelled = true;
      continue;
    }
    if (failure.empty()) {
      failure = absl::StrCat("rank ", i, ": ", s.error_message());
      failure_code = s.error_code();
    }
  }
  if (all_ok) {
    if (!calls[0]->has_result) {
      MarkBroken("rank 0 finished a job without a result");
      return absl::InternalError("rank 0 finished the job without a result");
    }
    return std::move(calls[0]->result);
  }
  if (failure.empty() && any_cancelled) {
    return absl::CancelledError("cancelled; every rank stopped at the same step");
  }
  // A request the pipeline itself rejected leaves the group intact.
  if (failure_code == grpc::StatusCode::INVALID_ARGUMENT) {
    return absl::InvalidArgumentError(failure);
  }
  MarkBroken(failure);
  return absl::UnavailableError(
      absl::StrCat("the worker group failed during the job (", failure, "); re-forming"));
}

std::vector<worker::v1::WorkerStatus> WorkerGroup::CollectStatus(
    std::chrono::milliseconds timeout) const {
  std::vector<std::shared_ptr<Rank>> ranks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks = ranks_;
  }
  std::vector<worker::v1::WorkerStatus> out;
  if (!ready()) return out;
  // All ranks at once (callback API), so one slow rank costs one timeout, not one per rank.
  struct Call {
    grpc::ClientContext ctx;
    worker::v1::GetStatusRequest request;
    worker::v1::WorkerStatus status;
    bool ok = false;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = ranks.size();
  for (auto& r : ranks) {
    calls.push_back(std::make_unique<Call>());
    Call* c = calls.back().get();
    c->ctx.set_deadline(After(timeout));
    r->stub->async()->GetStatus(&c->ctx, &c->request, &c->status, [&, c](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      c->ok = s.ok();
      if (--pending == 0) cv.notify_all();
    });
  }
  {
    // Every call ends by its deadline; wait for all callbacks, since they touch `calls`.
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  for (auto& c : calls) {
    if (c->ok) out.push_back(std::move(c->status));
  }
  return out;
}

}  // namespace ditserve::server
