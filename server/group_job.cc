#include "server/group_job.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/group_survival.h"
#include "common/grpc_status.h"

namespace ditserve::server {

GroupJob::GroupJob(const std::vector<std::shared_ptr<WorkerRank>>& ranks,
                   const worker::v1::RunRequest& request, const RunControl& control,
                   std::chrono::milliseconds stop_timeout)
    : request_(request),
      control_(control),
      stop_timeout_(stop_timeout),
      wakeup_(control.wakeup ? control.wakeup : &own_wakeup_),
      calls_(ranks.size()) {
  for (const auto& r : ranks) ranks_.push_back(r.get());
  for (auto& c : calls_) c = std::make_unique<RankCall>();
}

void GroupJob::Start() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    ranks_[i]->Post([self = shared_from_this(), i] { self->ReadRank(i); });
  }
}

void GroupJob::ReadRank(size_t i) {
  RankCall& call = *calls_[i];
  auto reader = ranks_[i]->stub().Run(&call.ctx, request_);
  worker::v1::RunEvent ev;
  worker::v1::RunResult result;
  bool has_result = false;
  while (reader->Read(&ev)) {
    if (ev.has_progress() && i == 0 && control_.on_progress) control_.on_progress(ev.progress());
    if (ev.has_result()) {
      result = std::move(*ev.mutable_result());
      has_result = true;
    }
  }
  grpc::Status status = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const absl::StatusCode code = FromGrpcStatus(status).code();
    const bool expected = GroupSurvives(code) && (code != absl::StatusCode::kCancelled ||
                                                  cancel_sent_.load() || abandoned_.load());
    if (!expected && first_failure_ < 0) first_failure_ = static_cast<int>(i);
    call.status = std::move(status);
    call.result = std::move(result);
    call.has_result = has_result;
    ++finished_;
  }
  wakeup_->Notify();
  std::lock_guard<std::mutex> lock(mu_);
  ++released_;
  released_cv_.notify_all();
}

void GroupJob::AbandonCalls() {
  abandoned_.store(true);
  for (auto& c : calls_) c->ctx.TryCancel();
}

void GroupJob::FailThrough(int index, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_failure_ < 0) {
      first_failure_ = index;
      failure_reason_ = why;
    }
  }
  wakeup_->Notify();
}

void GroupJob::Shutdown() {
  shutting_down_.store(true);
  AbandonCalls();
  wakeup_->Notify();
}

bool GroupJob::CancelWanted() const {
  return (control_.should_cancel && control_.should_cancel()) || Clock::now() >= control_.cancel_at;
}

void GroupJob::Wait() {
  const size_t n = calls_.size();
  std::optional<Clock::time_point> stop_deadline;
  while (true) {
    const bool abandoned = !abandon_reason_.empty();
    const Clock::time_point until = abandoned         ? Clock::time_point::max()
                                    : stop_deadline   ? *stop_deadline
                                    : cancel_sent_    ? Clock::time_point::max()
                                                      : control_.cancel_at;
    bool all_done = false, failed = false;
    wakeup_->WaitUntil(until, [&] {
      std::lock_guard<std::mutex> lock(mu_);
      all_done = finished_ == n;
      failed = first_failure_ >= 0;
      if (all_done) return true;
      if (abandoned) return false;  // only the end of the abandoned calls matters now
      return failed || shutting_down_.load() || (!cancel_sent_.load() && CancelWanted());
    });
    if (all_done) break;
    if (abandoned) continue;  // the abandoned calls are ending (spurious wake-up)
    if (failed || shutting_down_.load()) {
      abandon_reason_ = failed ? "a rank failed" : "shutting down";
      AbandonCalls();
    } else if (!cancel_sent_.load() && CancelWanted()) {
      cancel_sent_.store(true);
      SendCancel();
      // The ranks stop at the next step boundary; a step longer than the collective timeout
      // means the group is stuck.
      stop_deadline = Clock::now() + stop_timeout_;
    } else if (stop_deadline && Clock::now() >= *stop_deadline) {
      abandon_reason_ = absl::StrCat("the ranks did not stop within ", stop_timeout_.count(),
                                     " ms of the cancel");
      AbandonCalls();
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  released_cv_.wait(lock, [&] { return released_ == n; });
}

void GroupJob::SendCancel() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(2000));
    worker::v1::CancelRequest creq;
    creq.set_job_id(request_.job_id());
    worker::v1::CancelResponse cresp;
    grpc::Status s = ranks_[i]->stub().Cancel(&ctx, creq, &cresp);
    if (!s.ok()) spdlog::warn("job {}: Cancel on rank {}: {}", request_.job_id(), i, s.error_message());
  }
}

absl::StatusOr<worker::v1::RunResult> GroupJob::Outcome(std::string* broken) {
  broken->clear();
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_.load() && first_failure_ < 0) {
    return absl::UnavailableError("server is shutting down; the job was abandoned");
  }
  if (first_failure_ >= 0) {
    const int i = first_failure_;
    *broken = failure_reason_.empty()
                  ? absl::StrCat("rank ", i, ": ", calls_[i]->status.error_message())
                  : failure_reason_;
    return absl::UnavailableError(
        absl::StrCat("the worker group failed during the job (", *broken, "); re-forming"));
  }
  if (!abandon_reason_.empty()) {
    *broken = abandon_reason_;
    return absl::UnavailableError(
        absl::StrCat("the worker group is stuck (", abandon_reason_, "); re-forming"));
  }
  bool all_ok = true;
  for (size_t i = 0; i < calls_.size(); ++i) {
    const absl::Status s = FromGrpcStatus(calls_[i]->status);
    if (!s.ok() && s.code() != absl::StatusCode::kCancelled) {
      // A code every rank agreed on (a request the pipeline rejected, no memory for the job):
      // the group stays intact, the job ends with it.
      return absl::Status(s.code(), absl::StrCat("rank ", i, ": ", s.message()));
    }
    if (!s.ok()) all_ok = false;
  }
  if (!all_ok) return absl::CancelledError("cancelled; every rank stopped at the same step");
  if (!calls_[0]->has_result) {
    *broken = "rank 0 finished a job without a result";
    return absl::InternalError("rank 0 finished the job without a result");
  }
  return std::move(calls_[0]->result);
}

}  // namespace ditserve::server
