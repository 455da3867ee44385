#include "server/worker_group.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>

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

// The calls of one running job, shared between Run() and Shutdown().
struct WorkerGroup::Job {
  struct RankCall {
    grpc::ClientContext ctx;
    grpc::Status status;
    worker::v1::RunResult result;
    bool has_result = false;
  };
  explicit Job(size_t n, Wakeup* wakeup) : calls(n), wakeup(wakeup) {
    for (auto& c : calls) c = std::make_unique<RankCall>();
  }
  // Ends every call still running (client-side cancel: it completes at once, whatever the rank
  // does).
  void AbandonCalls() {
    abandoned.store(true);
    for (auto& c : calls) c->ctx.TryCancel();
  }

  std::vector<std::unique_ptr<RankCall>> calls;
  Wakeup* const wakeup;
  std::mutex mu;  // guards RankCall::status/result/has_result and the counters below
  size_t finished = 0;
  int first_failure = -1;  // the first rank that ended with an error the frontend did not cause
  std::string failure_reason;  // when set: why first_failure failed (a missed heartbeat)
  std::atomic<bool> cancel_sent{false};    // Cancel went to every rank
  std::atomic<bool> abandoned{false};      // the frontend ended the calls itself
  std::atomic<bool> shutting_down{false};
};

WorkerGroup::WorkerGroup(WorkerGroupOptions options) : options_(std::move(options)) {}

WorkerGroup::~WorkerGroup() { Shutdown(); }

uint32_t WorkerGroup::world_size() const {
  return options_.remote_addresses.empty()
             ? options_.spawn_count
             : static_cast<uint32_t>(options_.remote_addresses.size());
}

void WorkerGroup::Start() {
  control_ = std::thread([this] { ControlLoop(); });
  if (options_.heartbeat_timeout.count() > 0) heartbeat_ = std::thread([this] { HeartbeatLoop(); });
}

void WorkerGroup::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !control_.joinable() && ranks_.empty()) return;
    stopping_ = true;
    for (grpc::ClientContext* ctx : forming_) ctx->TryCancel();
    for (grpc::ClientContext* ctx : pinging_) ctx->TryCancel();
    // Under mu_: Run() unregisters its job (and its wakeup goes away) only under mu_.
    if (job_) {
      job_->shutting_down.store(true);
      job_->AbandonCalls();
      job_->wakeup->Notify();
    }
  }
  cv_.notify_all();
  if (control_.joinable()) control_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
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

int WorkerGroup::AddReadinessListener(std::function<void(bool)> listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_[next_listener_] = std::move(listener);
  return next_listener_++;
}

void WorkerGroup::RemoveReadinessListener(int id) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(id);
}

void WorkerGroup::SetReady(bool ready) {
  // The change and its announcement under one lock, so listeners see the changes in order.
  std::lock_guard<std::mutex> lock(listeners_mu_);
  if (ready_.exchange(ready) == ready) return;
  for (auto& [id, listener] : listeners_) listener(ready);
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

void WorkerGroup::OnProcessExit(const Rank* rank, int index) {
  pid_t pid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only a process of the current group counts; ConnectRanks stops the previous ones itself.
    const bool current = std::any_of(ranks_.begin(), ranks_.end(),
                                     [&](const auto& r) { return r.get() == rank; });
    if (!current || broken_ || stopping_) return;
    pid = rank->process->pid();
  }
  MarkBroken(absl::StrCat("worker rank ", index, " (pid ", pid, ") exited"));
}

void WorkerGroup::HeartbeatLoop() {
  while (true) {
    std::vector<std::shared_ptr<Rank>> ranks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, options_.heartbeat_interval, [&] { return stopping_; })) return;
      if (broken_ || !ready()) continue;  // forming has its own timeouts
      ranks = ranks_;
    }
    std::string why;
    const int hung = PingRanks(ranks, &why);
    if (hung >= 0) OnHung(ranks[hung], hung, why);
  }
}

int WorkerGroup::PingRanks(const std::vector<std::shared_ptr<Rank>>& ranks, std::string* why) {
  const size_t n = ranks.size();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return -1;
    for (auto& c : contexts) {
      c = std::make_unique<grpc::ClientContext>();
      c->set_deadline(After(options_.heartbeat_timeout));
      pinging_.push_back(c.get());
    }
  }
  std::vector<grpc::Status> results(n);
  std::vector<std::thread> pings;
  for (size_t i = 0; i < n; ++i) {
    pings.emplace_back([&, i] {
      worker::v1::WorkerStatus resp;
      results[i] = ranks[i]->stub->GetStatus(contexts[i].get(), worker::v1::GetStatusRequest(), &resp);
    });
  }
  for (auto& t : pings) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : contexts) pinging_.erase(std::find(pinging_.begin(), pinging_.end(), c.get()));
    if (stopping_) return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (results[i].ok()) continue;
    *why = absl::StrCat("rank ", i, " (", ranks[i]->address, ") did not answer a heartbeat within ",
                        options_.heartbeat_timeout.count(), " ms (",
                        FromGrpcStatus(results[i]).ToString(), "): hung or unreachable");
    return static_cast<int>(i);
  }
  return -1;
}

void WorkerGroup::OnHung(const std::shared_ptr<Rank>& rank, int index, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool current = index < static_cast<int>(ranks_.size()) && ranks_[index] == rank;
    if (!current || broken_ || stopping_) return;
    rank->hung.store(true);
    if (job_) {
      // Fail the running job through this rank; Run() abandons the other calls and breaks the
      // group. Run() unregisters its job (and its wakeup) only under mu_, held here.
      {
        std::lock_guard<std::mutex> job_lock(job_->mu);
        if (job_->first_failure < 0) {
          job_->first_failure = index;
          job_->failure_reason = why;
        }
      }
      spdlog::error("{}", why);
      job_->wakeup->Notify();
      return;
    }
  }
  MarkBroken(why);
}

void WorkerGroup::ControlLoop() {
  auto backoff = options_.retry_backoff;
  while (true) {
    {
      // Sleep until something breaks the group (a failed job, a spawned worker's exit) or
      // Shutdown(): both notify.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || broken_; });
      if (stopping_) return;
    }
    absl::Status s = Form();
    if (s.ok()) {
      backoff = options_.retry_backoff;
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
      // A hung process (SIGSTOP, a wedged device) would not act on SIGTERM: SIGKILL at once.
      if (r->process) r->process->Stop(std::chrono::milliseconds(r->hung.load() ? 0 : 2000));
    }
    ranks.clear();
    for (uint32_t i = 0; i < n; ++i) {
      WorkerProcessOptions po;
      po.binary = options_.worker_binary;
      po.host = options_.worker_host;
      po.rank = static_cast<int>(i);
      po.extra_args = options_.worker_extra_args;
      auto rank = std::make_shared<Rank>();
      auto proc = WorkerProcess::Start(
          po, [this, r = rank.get(), i] { OnProcessExit(r, static_cast<int>(i)); });
      if (!proc.ok()) return proc.status();
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
    if (!ranks[i]->channel->WaitForConnected(After(options_.connect_timeout))) {
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
      {
        // Shutdown() cancels a formation in progress (a load can take many minutes).
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) ctx.TryCancel();
        forming_.push_back(&ctx);
      }
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
      {
        std::lock_guard<std::mutex> lock(mu_);
        forming_.erase(std::find(forming_.begin(), forming_.end(), &ctx));
      }
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
    if (stopping_) return absl::UnavailableError("shutting down");
    model_ = models[0];
    broken_ = false;
  }
  formations_.fetch_add(1);
  spdlog::info("worker group ready: model '{}' ({}), tp={}, {} on {}", models[0].name(),
               models[0].family(), n, models[0].dtype(), models[0].device());
  SetReady(true);
  // A spawned worker that died while the group formed leaves no trace but a dead process.
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i]->process && !ranks[i]->process->Alive()) OnProcessExit(ranks[i].get(), static_cast<int>(i));
  }
  return absl::OkStatus();
}

absl::StatusOr<worker::v1::RunResult> WorkerGroup::Run(const worker::v1::RunRequest& request,
                                                       const RunControl& control) {
  if (!ready()) return absl::UnavailableError("the worker group is not ready");
  Wakeup own_wakeup;
  Wakeup* const wakeup = control.wakeup ? control.wakeup : &own_wakeup;
  std::vector<std::shared_ptr<Rank>> ranks;
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("server is shutting down");
    ranks = ranks_;
    job = std::make_shared<Job>(ranks.size(), wakeup);
    job_ = job;
  }
  const size_t n = ranks.size();

  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Job::RankCall& call = *job->calls[i];
      auto reader = ranks[i]->stub->Run(&call.ctx, request);
      RunEvent ev;
      worker::v1::RunResult result;
      bool has_result = false;
      while (reader->Read(&ev)) {
        if (ev.has_progress() && i == 0 && control.on_progress) control.on_progress(ev.progress());
        if (ev.has_result()) {
          result = std::move(*ev.mutable_result());
          has_result = true;
        }
      }
      grpc::Status status = reader->Finish();
      {
        std::lock_guard<std::mutex> lock(job->mu);
        // CANCELLED is expected only after the frontend asked every rank to stop or ended the
        // calls itself; otherwise the rank (or its connection) went away.
        // INVALID_ARGUMENT and RESOURCE_EXHAUSTED are agreed by every rank before the denoising
        // loop (a prompt it cannot take, no memory for the job): the group stays intact.
        const bool expected = status.ok() ||
                              status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                              status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                              (status.error_code() == grpc::StatusCode::CANCELLED &&
                               (job->cancel_sent.load() || job->abandoned.load()));
        if (!expected && job->first_failure < 0) job->first_failure = static_cast<int>(i);
        call.status = std::move(status);
        call.result = std::move(result);
        call.has_result = has_result;
        ++job->finished;
      }
      wakeup->Notify();
    });
  }

  // Wait for the calls, reacting to (in this order) the end of every call, a broken rank, a
  // cancel request and the stop deadline after a cancel. Nothing here polls: the rank threads
  // and whoever turns should_cancel() true notify `wakeup`; the only timers are `cancel_at` and
  // the stop deadline.
  bool abandoned = false;
  std::string abandon_reason;
  std::optional<Clock::time_point> stop_deadline;
  auto cancel_wanted = [&] {
    return (control.should_cancel && control.should_cancel()) ||
           Clock::now() >= control.cancel_at;
  };
  while (true) {
    const Clock::time_point until = abandoned        ? Clock::time_point::max()
                                    : stop_deadline    ? *stop_deadline
                                    : job->cancel_sent ? Clock::time_point::max()
                                                       : control.cancel_at;
    bool all_done = false, failed = false;
    wakeup->WaitUntil(until, [&] {
      std::lock_guard<std::mutex> lock(job->mu);
      all_done = job->finished == n;
      failed = job->first_failure >= 0;
      if (all_done) return true;
      if (abandoned) return false;  // only the end of the abandoned calls matters now
      return failed || job->shutting_down.load() || (!job->cancel_sent.load() && cancel_wanted());
    });
    if (all_done) break;
    if (abandoned) continue;  // the abandoned calls are ending (spurious wake-up)
    if (failed || job->shutting_down.load()) {
      abandoned = true;
      abandon_reason = failed ? "a rank failed" : "shutting down";
      job->AbandonCalls();
      continue;
    }
    if (!job->cancel_sent.load() && cancel_wanted()) {
      job->cancel_sent.store(true);
      for (size_t i = 0; i < n; ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(After(std::chrono::milliseconds(2000)));
        worker::v1::CancelRequest creq;
        creq.set_job_id(request.job_id());
        worker::v1::CancelResponse cresp;
        grpc::Status s = ranks[i]->stub->Cancel(&ctx, creq, &cresp);
        if (!s.ok()) spdlog::warn("job {}: Cancel on rank {}: {}", request.job_id(), i, s.error_message());
      }
      // The ranks stop at the next step boundary; a step longer than the collective timeout
      // means the group is stuck.
      stop_deadline = Clock::now() + options_.collective_timeout + std::chrono::milliseconds(5000);
      continue;
    }
    if (stop_deadline && Clock::now() >= *stop_deadline) {
      abandoned = true;
      abandon_reason = absl::StrCat("the ranks did not stop within ",
                                    (options_.collective_timeout.count() + 5000), " ms of the cancel");
      job->AbandonCalls();
    }
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job_ == job) job_.reset();
  }

  if (job->shutting_down.load() && job->first_failure < 0) {
    return absl::UnavailableError("server is shutting down; the job was abandoned");
  }
  if (job->first_failure >= 0) {
    const int i = job->first_failure;
    const std::string failure =
        job->failure_reason.empty()
            ? absl::StrCat("rank ", i, ": ", job->calls[i]->status.error_message())
            : job->failure_reason;
    MarkBroken(failure);
    return absl::UnavailableError(
        absl::StrCat("the worker group failed during the job (", failure, "); re-forming"));
  }
  if (abandoned) {
    MarkBroken(abandon_reason);
    return absl::UnavailableError(
        absl::StrCat("the worker group is stuck (", abandon_reason, "); re-forming"));
  }
  bool all_ok = true;
  for (size_t i = 0; i < n; ++i) {
    const grpc::Status& s = job->calls[i]->status;
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      // A request the pipeline itself rejected leaves the group intact.
      return absl::InvalidArgumentError(absl::StrCat("rank ", i, ": ", s.error_message()));
    }
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // Out of memory for this job, agreed by every rank: the group stays intact.
      return absl::ResourceExhaustedError(absl::StrCat("rank ", i, ": ", s.error_message()));
    }
    if (!s.ok()) all_ok = false;
  }
  if (!all_ok) return absl::CancelledError("cancelled; every rank stopped at the same step");
  if (!job->calls[0]->has_result) {
    MarkBroken("rank 0 finished a job without a result");
    return absl::InternalError("rank 0 finished the job without a result");
  }
  return std::move(job->calls[0]->result);
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
