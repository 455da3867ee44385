#include "tests/support/fake_worker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ditserve::testing {
namespace {

using worker::v1::InitEvent;
using worker::v1::RunEvent;

// How often a waiting handler looks at its caller's ServerContext (gRPC's sync API has no
// notification for a cancelled call).
constexpr auto kCallerCheck = std::chrono::milliseconds(5);

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

worker::v1::ModelDescription FakeModel(uint32_t world_size) {
  worker::v1::ModelDescription m;
  m.set_name("fake-model");
  m.set_family("flux1");
  m.set_tp_degree(world_size);
  m.set_dtype("float32");
  m.set_device("cpu");
  m.mutable_inputs()->set_accepts_text_prompt(true);
  m.mutable_defaults()->set_height(64);
  m.mutable_defaults()->set_width(64);
  m.mutable_defaults()->set_num_inference_steps(4);
  m.mutable_defaults()->set_guidance_scale(3.5f);
  m.mutable_defaults()->set_max_sequence_length(32);
  m.set_guidance_distilled(true);
  m.set_weight_bytes(1 << 20);
  m.mutable_step_cache()->set_method("first_block_cache");
  m.mutable_step_cache()->set_max_threshold(1.0);
  return m;
}

}  // namespace

class FakeWorkerCluster::Service final : public worker::v1::Worker::Service {
 public:
  Service(FakeWorkerCluster* cluster, int rank) : cluster_(cluster), rank_(rank) {}

  grpc::Status GetRendezvous(grpc::ServerContext*, const worker::v1::GetRendezvousRequest* req,
                             worker::v1::Rendezvous* resp) override {
    return cluster_->GetRendezvous(rank_, *req, resp);
  }
  grpc::Status Init(grpc::ServerContext* ctx, const worker::v1::InitRequest* req,
                    grpc::ServerWriter<InitEvent>* writer) override {
    return cluster_->Init(rank_, ctx, *req, writer);
  }
  grpc::Status Run(grpc::ServerContext* ctx, const worker::v1::RunRequest* req,
                   grpc::ServerWriter<RunEvent>* writer) override {
    return cluster_->Run(rank_, ctx, *req, writer);
  }
  grpc::Status Cancel(grpc::ServerContext*, const worker::v1::CancelRequest* req,
                      worker::v1::CancelResponse*) override {
    return cluster_->Cancel(rank_, *req);
  }
  grpc::Status GetStatus(grpc::ServerContext*, const worker::v1::GetStatusRequest*,
                         worker::v1::WorkerStatus* resp) override {
    return cluster_->GetStatus(rank_, resp);
  }
  grpc::Status Shutdown(grpc::ServerContext*, const worker::v1::ShutdownRequest*,
                        worker::v1::ShutdownResponse*) override {
    return grpc::Status::OK;
  }

 private:
  FakeWorkerCluster* const cluster_;
  const int rank_;
};

FakeWorkerCluster::FakeWorkerCluster(int world_size)
    : world_size_(world_size), ranks_(static_cast<size_t>(world_size)) {}

FakeWorkerCluster::~FakeWorkerCluster() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    Changed();
  }
  for (auto& r : ranks_) {
    if (r.killer.joinable()) r.killer.join();
    if (r.server) r.server->Shutdown(std::chrono::system_clock::now());
  }
  for (auto& r : ranks_) {
    r.server.reset();
    r.service.reset();
  }
}

void FakeWorkerCluster::Leave(Rank& rank) {
  if (!rank.group_id.empty()) rank.left_groups.insert(rank.group_id);
  rank.group_id.clear();
}

void FakeWorkerCluster::Changed() {
  ++changes_;
  cv_.notify_all();
}

absl::Status FakeWorkerCluster::Start() {
  for (int i = 0; i < world_size_; ++i) {
    if (absl::Status s = StartRank(i, 0); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status FakeWorkerCluster::StartRank(int rank, int port) {
  auto service = std::make_unique<Service>(this, rank);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                           &bound);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound == 0) {
    return absl::UnavailableError(absl::StrCat("fake rank ", rank, " cannot listen on port ", port));
  }
  std::lock_guard<std::mutex> lock(mu_);
  Rank& r = ranks_[rank];
  r.port = bound;
  r.service = std::move(service);
  r.server = std::move(server);
  r.alive = true;
  r.ready = false;
  r.group_id.clear();
  r.init_failed = false;
  Changed();
  return absl::OkStatus();
}

std::vector<std::string> FakeWorkerCluster::addresses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& r : ranks_) out.push_back(absl::StrCat("127.0.0.1:", r.port));
  return out;
}

void FakeWorkerCluster::SetScript(int rank, const FakeRankScript& script) {
  std::lock_guard<std::mutex> lock(mu_);
  ranks_[rank].script = script;
  Changed();
}

void FakeWorkerCluster::HoldInit(bool hold) {
  std::lock_guard<std::mutex> lock(mu_);
  hold_init_ = hold;
  Changed();
}

void FakeWorkerCluster::Die(int rank) {
  Rank& r = ranks_[rank];
  r.alive = false;
  r.ready = false;
  Leave(r);
  ++r.incarnation;
  Changed();
  // Server::Shutdown waits for the handlers, this one included: another thread runs it.
  grpc::Server* server = r.server.get();
  r.killer = std::thread([server] {
    server->Shutdown(std::chrono::system_clock::now());
    server->Wait();
  });
}

absl::Status FakeWorkerCluster::Restart(int rank) {
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Service> service;
  std::thread killer;
  int port = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Rank& r = ranks_[rank];
    if (r.alive) return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " is alive"));
    killer = std::move(r.killer);
    server = std::move(r.server);
    service = std::move(r.service);
    port = r.port;
  }
  if (killer.joinable()) killer.join();
  server.reset();
  service.reset();
  return StartRank(rank, port);
}

bool FakeWorkerCluster::alive(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].alive;
}

std::vector<FakeJobRecord> FakeWorkerCluster::jobs(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].jobs;
}

std::vector<std::string> FakeWorkerCluster::cancels(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].cancels;
}

int FakeWorkerCluster::init_calls(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(ranks_[rank].inits.size());
}

int FakeWorkerCluster::ready_inits(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].ready_inits;
}

uint64_t FakeWorkerCluster::cached_steps(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].cached_steps;
}

uint64_t FakeWorkerCluster::steps_executed(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].steps;
}

std::vector<worker::v1::InitRequest> FakeWorkerCluster::init_requests(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_[rank].inits;
}

bool FakeWorkerCluster::WaitFor(const std::function<bool()>& done,
                                std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const uint64_t seen = changes_;
    lock.unlock();
    if (done()) return true;
    lock.lock();
    if (!cv_.wait_until(lock, deadline, [&] { return changes_ != seen; })) {
      lock.unlock();
      return done();
    }
  }
}

absl::StatusOr<bool> FakeWorkerCluster::Meet(std::unique_lock<std::mutex>& lock, int rank,
                                             const std::string& key, bool flag,
                                             const std::function<bool()>& abort) {
  Rank& me = ranks_[rank];
  const std::string group = me.group_id;
  const auto timeout = std::chrono::milliseconds(me.collective_timeout_ms);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Meeting& m = meetings_[absl::StrCat(group, "/", key)];  // std::map: stable reference
  if (m.arrived.empty()) m.arrived.assign(static_cast<size_t>(world_size_), false);
  if (!m.arrived[rank]) {
    m.arrived[rank] = true;
    ++m.count;
  }
  m.flag = m.flag || flag;
  Changed();
  while (true) {
    if (m.count == static_cast<size_t>(world_size_)) return m.flag;
    if (stopping_) return absl::UnavailableError("the fake cluster is stopping");
    if (!me.alive || me.group_id != group) {
      return absl::UnavailableError(absl::StrCat("rank ", rank, " left group ", group));
    }
    for (int p = 0; p < world_size_; ++p) {
      const Rank& peer = ranks_[p];
      // A peer that has not joined yet may still come (until the timeout); one that left the
      // group, died, or failed to join it will not.
      const bool gone = !peer.alive || peer.left_groups.count(group) > 0 ||
                        (peer.group_id == group && peer.init_failed);
      if (!m.arrived[p] && gone) {
        return absl::UnavailableError(
            absl::StrCat("collective ", key, ": rank ", p, " left the group (connection reset)"));
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat("collective ", key, " timed out after ",
                                                 timeout.count(), " ms"));
    }
    if (abort && abort()) return absl::CancelledError("the caller cancelled the call");
    cv_.wait_until(lock, std::min(deadline, now + kCallerCheck));
  }
}

bool FakeWorkerCluster::Sleep(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds d,
                              const std::function<bool()>& abort) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (stopping_ || (abort && abort())) return false;
    cv_.wait_until(lock, std::min(until, std::chrono::steady_clock::now() + kCallerCheck));
  }
  return true;
}

grpc::Status FakeWorkerCluster::GetRendezvous(int rank, const worker::v1::GetRendezvousRequest& req,
                                              worker::v1::Rendezvous* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  resp->set_world_size(req.world_size());
  resp->set_store_host("127.0.0.1");
  resp->set_store_port(0);
  resp->set_group_id(absl::StrCat("fake-", ++rendezvous_));
  Changed();
  return grpc::Status::OK;
}

grpc::Status FakeWorkerCluster::Init(int rank, grpc::ServerContext* ctx,
                                     const worker::v1::InitRequest& req,
                                     grpc::ServerWriter<InitEvent>* writer) {
  std::unique_lock<std::mutex> lock(mu_);
  Rank& r = ranks_[rank];
  r.inits.push_back(req);
  r.ready = false;
  Leave(r);
  r.group_id = req.rendezvous().group_id();
  r.init_failed = false;
  r.collective_timeout_ms = req.collective_timeout_ms() ? req.collective_timeout_ms() : 300000;
  const FakeRankScript script = r.script;
  Changed();
  auto fail = [&](const absl::Status& s) {
    r.init_failed = true;
    Changed();
    return ToGrpc(s);
  };
  if (req.rank() != static_cast<uint32_t>(rank) ||
      req.rendezvous().world_size() != static_cast<uint32_t>(world_size_)) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "fake rank ", rank, " of ", world_size_, " got Init for rank ", req.rank(), " of ",
        req.rendezvous().world_size())));
  }
  InitEvent group;
  group.set_phase("group");
  lock.unlock();
  writer->Write(group);
  lock.lock();
  if (!script.init_error.ok()) return fail(script.init_error);
  auto caller_gone = [ctx] { return ctx->IsCancelled(); };
  while (hold_init_ && !stopping_ && !caller_gone()) cv_.wait_for(lock, kCallerCheck);
  absl::StatusOr<bool> met = Meet(lock, rank, "init", false, caller_gone);
  if (!met.ok()) return fail(met.status());
  InitEvent load;
  load.set_phase("load");
  load.set_bytes_loaded(1 << 20);
  load.set_bytes_total(1 << 20);
  InitEvent ready;
  ready.set_phase("ready");
  *ready.mutable_model() = FakeModel(static_cast<uint32_t>(world_size_));
  lock.unlock();
  writer->Write(load);
  writer->Write(ready);
  lock.lock();
  if (!r.alive || r.group_id != req.rendezvous().group_id()) {
    return fail(absl::UnavailableError("the rank died or re-joined during Init"));
  }
  r.ready = true;
  ++r.ready_inits;
  Changed();
  return grpc::Status::OK;
}

grpc::Status FakeWorkerCluster::Run(int rank, grpc::ServerContext* ctx,
                                    const worker::v1::RunRequest& req,
                                    grpc::ServerWriter<RunEvent>* writer) {
  std::unique_lock<std::mutex> lock(mu_);
  Rank& r = ranks_[rank];
  if (!r.alive) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the rank is dead");
  if (!r.ready) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "worker has not been initialised (call Init first)");
  }
  FakeJobRecord record;
  record.job_id = req.job_id();
  for (const auto& item : req.items()) record.request_ids.push_back(item.request_id());
  record.batch_size = static_cast<size_t>(req.items_size());
  record.height = req.height();
  record.width = req.width();
  record.steps = r.script.steps ? r.script.steps : req.num_inference_steps();
  record.cache_threshold = req.cache_threshold();
  record.cancel_received =
      std::find(r.cancels.begin(), r.cancels.end(), req.job_id()) != r.cancels.end();
  r.jobs.push_back(record);
  const size_t index = r.jobs.size() - 1;
  auto job = [&]() -> FakeJobRecord& { return r.jobs[index]; };
  const uint32_t steps = record.steps;
  Changed();

  auto caller_gone = [ctx] { return ctx->IsCancelled(); };
  // A rank whose collective failed, or whose caller gave up on it, leaves its group (the real
  // worker is not ready after a failed collective either).
  auto end = [&](const std::string& outcome, const absl::Status& s) {
    job().outcome = outcome;
    if ((!s.ok() && s.code() != absl::StatusCode::kCancelled) || outcome == "abandoned") {
      r.ready = false;
      Leave(r);
    }
    Changed();
    return ToGrpc(s);
  };
  auto wait_for_caller = [&] {
    while (!caller_gone() && !stopping_) cv_.wait_for(lock, kCallerCheck);
  };

  for (uint32_t step = 1; step <= steps; ++step) {
    // Step boundary: every rank learns whether any rank was asked to cancel.
    const bool local_cancel = job().cancel_received || caller_gone();
    absl::StatusOr<bool> cancel = Meet(lock, rank, absl::StrCat(req.job_id(), "/c", step),
                                       local_cancel, caller_gone);
    if (!cancel.ok()) {
      return end(cancel.status().code() == absl::StatusCode::kCancelled ? "abandoned"
                                                                         : "failed: " + std::string(cancel.status().message()),
                 cancel.status());
    }
    if (*cancel) {
      return end("cancelled",
                 absl::CancelledError(absl::StrCat("cancelled at the boundary of step ", step)));
    }
    FakeRankScript& script = r.script;
    if (script.die_at_step == step) {
      script.die_at_step = 0;
      job().outcome = "died";
      Die(rank);
      wait_for_caller();  // the server's shutdown cancels this call
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the rank died");
    }
    if (script.hang_at_step == step) {
      script.hang_at_step = 0;
      job().outcome = "hung";
      Changed();
      wait_for_caller();
      r.ready = false;
      Leave(r);
      Changed();
      return grpc::Status(grpc::StatusCode::CANCELLED, "the rank hung");
    }
    Sleep(lock, script.step_delay, {});
    absl::StatusOr<bool> met = Meet(lock, rank, absl::StrCat(req.job_id(), "/s", step), false,
                                    caller_gone);
    if (!met.ok()) {
      return end(met.status().code() == absl::StatusCode::kCancelled ? "abandoned"
                                                                      : "failed: " + std::string(met.status().message()),
                 met.status());
    }
    job().steps_done = step;
    ++r.steps;
    Changed();
    RunEvent progress;
    progress.mutable_progress()->set_step(step);
    progress.mutable_progress()->set_total_steps(steps);
    progress.mutable_progress()->set_step_seconds(
        std::chrono::duration<double>(script.step_delay).count());
    lock.unlock();
    writer->Write(progress);
    lock.lock();
  }
  RunEvent result;
  if (rank == 0) {
    for (const auto& item : req.items()) {
      result.mutable_result()->add_outputs()->set_image(
          absl::StrCat("fake image for ", item.request_id()));
    }
  }
  result.mutable_result()->set_denoise_seconds(0.001 * steps);
  // With the cache on, the first step is full and the rest are "cached".
  const uint32_t cached = req.cache_threshold() > 0 && steps > 0 ? steps - 1 : 0;
  result.mutable_result()->set_full_steps(steps - cached);
  result.mutable_result()->set_cached_steps(cached);
  r.cached_steps += cached;
  job().outcome = "ok";
  Changed();
  lock.unlock();
  writer->Write(result);
  return grpc::Status::OK;
}

grpc::Status FakeWorkerCluster::Cancel(int rank, const worker::v1::CancelRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  Rank& r = ranks_[rank];
  r.cancels.push_back(req.job_id());
  for (auto& job : r.jobs) {
    if (job.job_id == req.job_id()) job.cancel_received = true;
  }
  Changed();
  return grpc::Status::OK;
}

grpc::Status FakeWorkerCluster::GetStatus(int rank, worker::v1::WorkerStatus* resp) {
  std::lock_guard<std::mutex> lock(mu_);
  const Rank& r = ranks_[rank];
  resp->set_rank(static_cast<uint32_t>(rank));
  resp->set_ready(r.ready);
  resp->set_steps(r.steps);
  resp->set_cached_steps(r.cached_steps);
  resp->set_weight_bytes(r.ready ? 1 << 20 : 0);
  return grpc::Status::OK;
}

}  // namespace ditserve::testing
