#include "server/dispatcher.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace ditserve::server {
namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Dispatcher::Dispatcher(AdmissionQueue* queue, WorkerGroup* group, size_t max_batch,
                       DispatchObserver observer)
    : queue_(queue), group_(group), max_batch_(max_batch), observer_(std::move(observer)) {}

Dispatcher::~Dispatcher() { Join(); }

void Dispatcher::Start() { thread_ = std::thread([this] { Loop(); }); }

void Dispatcher::Join() {
  if (thread_.joinable()) thread_.join();
}

void Dispatcher::Loop() {
  while (true) {
    auto batch = queue_->PopBatch(max_batch_);
    if (batch.empty()) return;  // closed
    busy_.store(true);
    RunBatch(batch);
    busy_.store(false);
  }
}

void Dispatcher::RunBatch(const std::vector<std::shared_ptr<PendingRequest>>& batch) {
  auto all_cancelled = [&] {
    for (const auto& r : batch) {
      if (!r->cancelled()) return false;
    }
    return true;
  };
  // Wait for the group (it may be re-forming after a failure) as long as a client still waits.
  while (!group_->ready()) {
    if (all_cancelled()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const Clock::time_point start = Clock::now();
  for (const auto& r : batch) {
    if (observer_.on_start) observer_.on_start(*r, SecondsBetween(r->enqueued_at(), start));
  }
  if (all_cancelled()) {
    for (const auto& r : batch) {
      absl::Status why = Clock::now() >= r->deadline()
                             ? absl::DeadlineExceededError("deadline expired before the job ran")
                             : absl::CancelledError("cancelled before the job ran");
      r->Finish(why);
      if (observer_.on_dropped) observer_.on_dropped(*r, why);
    }
    return;
  }

  const RequestShape& shape = batch.front()->request().shape;
  worker::v1::RunRequest run;
  run.set_job_id(absl::StrCat(batch.front()->id(), "#", ++job_counter_));
  run.set_height(shape.height);
  run.set_width(shape.width);
  run.set_num_inference_steps(shape.steps);
  run.set_max_sequence_length(shape.max_sequence_length);
  run.set_output_format(static_cast<v1::OutputFormat>(shape.output_format));
  for (const auto& r : batch) {
    *run.add_items() = r->request().item;
    run.mutable_items()->rbegin()->set_request_id(r->id());
  }
  spdlog::info("job {}: {} request(s), {}x{}, {} steps", run.job_id(), batch.size(), shape.width,
               shape.height, shape.steps);

  auto on_progress = [&](const worker::v1::StepProgress& p) {
    const auto now = Clock::now();
    v1::GenerateEvent ev;
    ev.mutable_progress()->set_step(p.step());
    ev.mutable_progress()->set_total_steps(p.total_steps());
    ev.mutable_progress()->set_step_seconds(p.step_seconds());
    for (const auto& r : batch) {
      v1::GenerateEvent copy = ev;
      copy.mutable_progress()->set_elapsed_seconds(SecondsBetween(r->enqueued_at(), now));
      r->PushEvent(std::move(copy));
    }
    if (observer_.on_step) observer_.on_step(p.step_seconds(), p.step());
  };
  auto result = group_->Run(run, on_progress, all_cancelled);
  const Clock::time_point end = Clock::now();

  if (!result.ok()) {
    spdlog::warn("job {}: {}", run.job_id(), result.status().ToString());
    for (const auto& r : batch) {
      absl::Status s = result.status();
      if (s.code() == absl::StatusCode::kCancelled && Clock::now() >= r->deadline()) {
        s = absl::DeadlineExceededError("deadline expired; the job was stopped at a step boundary");
      }
      r->Finish(s);
    }
    return;
  }
  if (result->items_size() != static_cast<int>(batch.size())) {
    for (const auto& r : batch) {
      r->Finish(absl::InternalError(absl::StrCat("rank 0 returned ", result->items_size(),
                                                 " results for ", batch.size(), " requests")));
    }
    return;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& r = batch[i];
    v1::GenerateResponse resp = std::move(*result->mutable_items(static_cast<int>(i)));
    resp.set_request_id(r->id());
    v1::Timings* t = resp.mutable_timings();
    t->set_queue_seconds(SecondsBetween(r->enqueued_at(), start));
    t->set_encode_seconds(result->encode_seconds());
    t->set_denoise_seconds(result->denoise_seconds());
    t->set_decode_seconds(result->decode_seconds());
    t->set_total_seconds(SecondsBetween(r->enqueued_at(), end));
    r->Finish(absl::OkStatus(), std::move(resp));
  }
  spdlog::info("job {}: done in {:.3f} s", run.job_id(), SecondsBetween(start, end));
}

}  // namespace ditserve::server
