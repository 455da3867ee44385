#include "server/worker_group.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace ditserve::server {
namespace {

using worker::v1::InitEvent;

constexpr std::chrono::milliseconds kTransientRetryMax{10000};

std::chrono::system_clock::time_point After(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

}  // namespace

bool IsPermanentInitError(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kUnimplemented;
}

namespace {

// A retry delay that doubles from `first` up to `max` (`first` above `max` is `max`).
struct Backoff {
  Backoff(std::chrono::milliseconds first, std::chrono::milliseconds max)
      : first(std::min(first, max)), max(max), next(this->first) {}
  std::chrono::milliseconds Next() {
    const auto d = next;
    next = std::min(next * 2, max);
    return d;
  }
  void Reset() { next = first; }

  const std::chrono::milliseconds first, max;
  std::chrono::milliseconds next;
};

}  // namespace

// The control thread's retry state between failed formations.
struct WorkerGroup::RetryState {
  Backoff transient;
  Backoff lasting;  // after a permanent failure
  std::optional<absl::Status> said;  // the permanent error logged at ERROR, if it repeats
  void Reset() {
    transient.Reset();
    lasting.Reset();
    said.reset();
  }
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
    // Under mu_: Run() unregisters its job (and its wakeup may go away) only under mu_.
    if (job_) job_->Shutdown();
  }
  cv_.notify_all();
  if (control_.joinable()) control_.join();
  if (heartbeat_.joinable()) heartbeat_.join();
  SetReady(false);
  Ranks ranks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks.swap(ranks_);
  }
  for (auto& r : ranks) {
    if (r->process()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(After(std::chrono::milliseconds(2000)));
      worker::v1::ShutdownResponse resp;
      r->stub().Shutdown(&ctx, worker::v1::ShutdownRequest(), &resp);
    }
  }
  for (auto& r : ranks) {
    if (r->process()) r->process()->Stop();
  }
}

std::optional<worker::v1::ModelDescription> WorkerGroup::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

std::optional<FormationFailure> WorkerGroup::formation_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
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

void WorkerGroup::OnProcessExit(uint64_t generation, int index) {
  pid_t pid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only a process of the current group counts; SpawnRanks stops the previous ones itself.
    if (generation != rank_generation_ || broken_ || stopping_ ||
        index >= static_cast<int>(ranks_.size())) {
      return;
    }
    pid = ranks_[index]->process()->pid();
  }
  MarkBroken(absl::StrCat("worker rank ", index, " (pid ", pid, ") exited"));
}

void WorkerGroup::HeartbeatLoop() {
  while (true) {
    Ranks ranks;
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

int WorkerGroup::PingRanks(const Ranks& ranks, std::string* why) {
  // All ranks at once through the callback API: no thread per ping.
  struct Ping {
    grpc::ClientContext ctx;
    worker::v1::GetStatusRequest request;
    worker::v1::WorkerStatus response;
    grpc::Status status;
  };
  const size_t n = ranks.size();
  std::vector<std::unique_ptr<Ping>> pings(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return -1;
    for (auto& p : pings) {
      p = std::make_unique<Ping>();
      p->ctx.set_deadline(After(options_.heartbeat_timeout));
      pinging_.push_back(&p->ctx);
    }
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = n;
  for (size_t i = 0; i < n; ++i) {
    Ping* p = pings[i].get();
    ranks[i]->stub().async()->GetStatus(&p->ctx, &p->request, &p->response,
                                        [&, p](grpc::Status s) {
                                          std::lock_guard<std::mutex> lock(mu);
                                          p->status = std::move(s);
                                          if (--pending == 0) cv.notify_all();
                                        });
  }
  {
    // Every call ends by its deadline; wait for all callbacks, since they touch `pings`.
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : pings) pinging_.erase(std::find(pinging_.begin(), pinging_.end(), &p->ctx));
    if (stopping_) return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (pings[i]->status.ok()) continue;
    *why = absl::StrCat("rank ", i, " (", ranks[i]->address(), ") did not answer a heartbeat within ",
                        options_.heartbeat_timeout.count(), " ms (",
                        FromGrpcStatus(pings[i]->status).ToString(), "): hung or unreachable");
    return static_cast<int>(i);
  }
  return -1;
}

void WorkerGroup::OnHung(const std::shared_ptr<WorkerRank>& rank, int index,
                         const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool current = index < static_cast<int>(ranks_.size()) && ranks_[index] == rank;
    if (!current || broken_ || stopping_) return;
    rank->hung.store(true);
    if (job_) {
      // Fail the running job through this rank; Run() abandons the other calls and breaks the
      // group. Run() unregisters its job (and its wakeup) only under mu_, held here.
      spdlog::error("{}", why);
      job_->FailThrough(index, why);
      return;
    }
  }
  MarkBroken(why);
}

void WorkerGroup::ControlLoop() {
  RetryState retry{Backoff(options_.retry_backoff, kTransientRetryMax),
                   Backoff(options_.permanent_retry_backoff, options_.permanent_retry_max),
                   std::nullopt};
  while (WaitUntilBroken()) {
    bool permanent = false;
    absl::Status s = Form(&permanent);
    if (s.ok()) {
      retry.Reset();
      continue;
    }
    if (WaitToRetry(OnFormationFailed(s, permanent, retry))) {
      spdlog::info("forming the worker group again now, as asked (SIGHUP)");
      retry.Reset();
    }
  }
}

bool WorkerGroup::WaitUntilBroken() {
  // Sleep until something breaks the group (a failed job, a spawned worker's exit, a missed
  // heartbeat) or Shutdown(): all notify.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || broken_; });
  return !stopping_;
}

std::chrono::milliseconds WorkerGroup::OnFormationFailed(const absl::Status& status,
                                                         bool permanent, RetryState& retry) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t attempts = failure_ ? failure_->attempts + 1 : 1;
    failure_ = FormationFailure{status, permanent, attempts};
  }
  if (!permanent) {
    retry.said.reset();
    const auto delay = retry.transient.Next();
    spdlog::error("forming the worker group failed: {}; retrying in {} ms", status.ToString(),
                  delay.count());
    return delay;
  }
  permanent_failures_.fetch_add(1);
  const auto delay = retry.lasting.Next();
  if (retry.said == status) {
    spdlog::info("forming the worker group failed again with the same error; retrying in {} s",
                 delay.count() / 1000.0);
  } else {
    spdlog::error(
        "forming the worker group failed: {}; the workers refuse the model or a setting, so "
        "retrying soon cannot help: retrying in {} s, then less often (up to every {} s), or at "
        "once on SIGHUP",
        status.ToString(), delay.count() / 1000.0, options_.permanent_retry_max.count() / 1000.0);
    retry.said = status;
  }
  return delay;
}

bool WorkerGroup::WaitToRetry(std::chrono::milliseconds delay) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, delay, [&] { return stopping_ || retry_now_; });
  const bool asked = retry_now_ && !stopping_;
  retry_now_ = false;
  return asked;
}

void WorkerGroup::RetryNow() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    if (!broken_) {
      spdlog::info("the worker group is formed: nothing to retry");
      return;
    }
    retry_now_ = true;
  }
  cv_.notify_all();
}

absl::StatusOr<WorkerGroup::Ranks> WorkerGroup::SpawnRanks() {
  // Always a fresh set of processes, so no rank is left stuck inside a collective of the previous
  // group.
  Ranks previous;
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    previous.swap(ranks_);
    generation = ++rank_generation_;
  }
  for (auto& r : previous) {
    // A hung process (SIGSTOP, a wedged device) would not act on SIGTERM: SIGKILL at once.
    if (r->process()) r->process()->Stop(std::chrono::milliseconds(r->hung.load() ? 0 : 2000));
  }
  previous.clear();
  Ranks ranks;
  for (uint32_t i = 0; i < options_.spawn_count; ++i) {
    WorkerProcessOptions po;
    po.binary = options_.worker_binary;
    po.host = options_.worker_host;
    po.rank = static_cast<int>(i);
    po.extra_args = options_.worker_extra_args;
    ASSIGN_OR_RETURN(std::unique_ptr<WorkerProcess> proc,
                     WorkerProcess::Start(po, [this, generation, i] {
                       OnProcessExit(generation, static_cast<int>(i));
                     }));
    const std::string address = proc->address();
    ranks.push_back(std::make_shared<WorkerRank>(address, std::move(proc)));
  }
  return ranks;
}

absl::Status WorkerGroup::ConnectRanks() {
  Ranks ranks;
  if (options_.remote_addresses.empty()) {
    ASSIGN_OR_RETURN(ranks, SpawnRanks());
  } else {
    for (const auto& address : options_.remote_addresses) {
      ranks.push_back(std::make_shared<WorkerRank>(address, nullptr));
    }
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!ranks[i]->WaitForConnected(After(options_.connect_timeout))) {
      return absl::UnavailableError(
          absl::StrCat("worker rank ", i, " at ", ranks[i]->address(), " is not reachable"));
    }
  }
  Ranks previous;  // goes outside the lock (its ranks' threads are joined)
  std::lock_guard<std::mutex> lock(mu_);
  previous.swap(ranks_);
  ranks_ = std::move(ranks);
  return absl::OkStatus();
}

absl::Status WorkerGroup::Form(bool* permanent) {
  *permanent = false;
  SetReady(false);
  RETURN_IF_ERROR(ConnectRanks());
  Ranks ranks;
  uint64_t generation, spawned;
  bool quiet;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks = ranks_;
    spawned = rank_generation_;
    generation = ++group_counter_;
    quiet = failure_ && failure_->permanent;  // retrying a permanent failure: one line per retry
  }
  spdlog::log(quiet ? spdlog::level::debug : spdlog::level::info,
              "forming worker group of {} rank(s) (generation {})", ranks.size(), generation);
  ASSIGN_OR_RETURN(worker::v1::Rendezvous rendezvous, GetRendezvous(ranks, generation));
  std::vector<worker::v1::ModelDescription> models;
  RETURN_IF_ERROR(InitRanks(ranks, rendezvous, &models, permanent));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("shutting down");
    model_ = models[0];
    broken_ = false;
    retry_now_ = false;
    failure_.reset();
  }
  formations_.fetch_add(1);
  spdlog::info("worker group ready: model '{}' ({}), tp={}, {} on {}", models[0].name(),
               models[0].family(), ranks.size(), models[0].dtype(), models[0].device());
  SetReady(true);
  // A spawned worker that died while the group formed leaves no trace but a dead process.
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i]->process() && !ranks[i]->process()->Alive()) {
      OnProcessExit(spawned, static_cast<int>(i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<worker::v1::Rendezvous> WorkerGroup::GetRendezvous(const Ranks& ranks,
                                                                  uint64_t generation) {
  worker::v1::Rendezvous rendezvous;
  grpc::ClientContext ctx;
  ctx.set_deadline(After(std::chrono::milliseconds(30000)));
  worker::v1::GetRendezvousRequest req;
  req.set_world_size(static_cast<uint32_t>(ranks.size()));
  grpc::Status s = ranks[0]->stub().GetRendezvous(&ctx, req, &rendezvous);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("rank 0 GetRendezvous: ", s.error_message()));
  }
  rendezvous.set_world_size(static_cast<uint32_t>(ranks.size()));
  rendezvous.set_group_id(absl::StrCat("g", generation, "-", ::getpid()));
  return rendezvous;
}

absl::Status WorkerGroup::InitRanks(const Ranks& ranks, const worker::v1::Rendezvous& rendezvous,
                                    std::vector<worker::v1::ModelDescription>* models,
                                    bool* permanent) {
  const size_t n = ranks.size();
  std::vector<absl::Status> results(n);
  models->assign(n, worker::v1::ModelDescription());
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) {
    ranks[i]->Post([&, i] {
      results[i] = InitRank(*ranks[i], static_cast<uint32_t>(i), rendezvous, &(*models)[i]);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();  // under the lock: this frame may go as soon as the lock is released
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == n; });
  }
  // A rank whose peer failed sees its collective fail (UNAVAILABLE): the permanent error of the
  // rank that refused the model is the reason.
  for (const auto& s : results) {
    if (IsPermanentInitError(s.code())) {
      *permanent = true;
      return s;
    }
  }
  for (const auto& s : results) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status WorkerGroup::InitRank(WorkerRank& rank, uint32_t index,
                                   const worker::v1::Rendezvous& rendezvous,
                                   worker::v1::ModelDescription* model) {
  grpc::ClientContext ctx;
  ctx.set_deadline(After(options_.init_timeout));
  {
    // Shutdown() cancels a formation in progress (a load can take many minutes).
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) ctx.TryCancel();
    forming_.push_back(&ctx);
  }
  worker::v1::InitRequest req = options_.init_template;
  req.set_rank(index);
  *req.mutable_rendezvous() = rendezvous;
  auto reader = rank.stub().Init(&ctx, req);
  InitEvent ev;
  bool ready = false;
  while (reader->Read(&ev)) {
    if (ev.phase() == "load" && ev.bytes_total() > 0) {
      spdlog::debug("rank {} loaded {}/{} bytes", index, ev.bytes_loaded(), ev.bytes_total());
    }
    if (ev.phase() == "ready") {
      ready = true;
      *model = ev.model();
    }
  }
  grpc::Status s = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    forming_.erase(std::find(forming_.begin(), forming_.end(), &ctx));
  }
  if (!s.ok()) {
    return absl::Status(FromGrpcStatus(s).code(),
                        absl::StrCat("rank ", index, " Init: ", s.error_message()));
  }
  if (!ready) return absl::InternalError(absl::StrCat("rank ", index, " Init ended before ready"));
  return absl::OkStatus();
}

absl::StatusOr<worker::v1::RunResult> WorkerGroup::Run(const worker::v1::RunRequest& request,
                                                       const RunControl& control) {
  if (!ready()) return absl::UnavailableError("the worker group is not ready");
  Ranks ranks;  // outlives the job's calls
  std::shared_ptr<GroupJob> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("server is shutting down");
    ranks = ranks_;
    job = std::make_shared<GroupJob>(
        ranks, request, control, options_.collective_timeout + std::chrono::milliseconds(5000));
    job_ = job;
  }
  job->Start();
  job->Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job_ == job) job_.reset();
  }
  std::string broken;
  auto result = job->Outcome(&broken);
  if (!broken.empty()) MarkBroken(broken);
  return result;
}

std::vector<worker::v1::WorkerStatus> WorkerGroup::CollectStatus(
    std::chrono::milliseconds timeout) const {
  Ranks ranks;
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
    r->stub().async()->GetStatus(&c->ctx, &c->request, &c->status, [&, c](grpc::Status s) {
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
