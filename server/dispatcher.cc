#include "server/dispatcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace ditserve::server {
namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ", LoRA a:0.8 b:1" for the job log line; empty without adapters.
std::string LorasText(const RequestShape& shape) {
  std::string out;
  for (const auto& [name, scale] : shape.loras) {
    absl::StrAppend(&out, out.empty() ? ", LoRA " : " ", name, ":", scale);
  }
  return out;
}

bool AllCancelled(const std::vector<std::shared_ptr<PendingRequest>>& batch) {
  for (const auto& r : batch) {
    if (!r->cancelled()) return false;
  }
  return true;
}

Clock::time_point LastDeadline(const std::vector<std::shared_ptr<PendingRequest>>& batch) {
  Clock::time_point last = Clock::time_point::min();
  for (const auto& r : batch) last = std::max(last, r->deadline().when());
  return last;
}

// Sends a job step to every request of its batch (each with its own elapsed time) and the observer.
void RelayProgress(const std::vector<std::shared_ptr<PendingRequest>>& batch,
                   const worker::v1::StepProgress& p, const DispatchObserver& observer) {
  const auto now = Clock::now();
  v1::GenerateEvent ev;
  ev.mutable_progress()->set_step(p.step());
  ev.mutable_progress()->set_total_steps(p.total_steps());
  ev.mutable_progress()->set_step_seconds(p.step_seconds());
  for (size_t i = 0; i < batch.size(); ++i) {
    v1::GenerateEvent copy = ev;
    copy.mutable_progress()->set_elapsed_seconds(SecondsBetween(batch[i]->enqueued_at(), now));
    if (static_cast<int>(i) < p.previews_size()) {  // item i's preview (the job's order)
      copy.mutable_progress()->set_preview(p.previews(static_cast<int>(i)));
      copy.mutable_progress()->set_preview_index(p.preview_index());
    }
    batch[i]->PushEvent(std::move(copy));
  }
  if (observer.on_step) observer.on_step(p.step_seconds(), p.step());
}

// The job of a batch: the first request's shape, every request's item, job id "ID#N".
worker::v1::RunRequest MakeRunRequest(const std::vector<std::shared_ptr<PendingRequest>>& batch,
                                      uint64_t job_number) {
  const RequestShape& shape = batch.front()->request().shape;
  worker::v1::RunRequest run;
  run.set_job_id(absl::StrCat(batch.front()->id(), "#", job_number));
  run.set_height(shape.height);
  run.set_width(shape.width);
  run.set_num_inference_steps(shape.steps);
  run.set_max_sequence_length(shape.max_sequence_length);
  run.set_output_format(static_cast<v1::OutputFormat>(shape.output_format));
  run.set_output_quality(shape.output_quality);
  run.set_preview_images(shape.preview_images);
  run.set_cache_threshold(shape.cache_threshold);  // on: the batch is one request (batchable())
  for (const auto& r : batch) {
    *run.add_items() = r->request().item;
    run.mutable_items()->rbegin()->set_request_id(r->id());
  }
  return run;
}

// Hands each request its response to a successful job: rank 0's image or latents for its item, and
// the metadata the frontend owns (request id, format, size, seed, steps from the job `run`, and the
// timings with the job's full and cached transformer passes). When rank 0 returned another number
// of outputs, fails every request with INTERNAL instead and returns false.
bool FinishBatch(const std::vector<std::shared_ptr<PendingRequest>>& batch,
                 const worker::v1::RunRequest& run, worker::v1::RunResult result,
                 Clock::time_point start, Clock::time_point end) {
  if (result.outputs_size() != static_cast<int>(batch.size())) {
    for (const auto& r : batch) {
      r->Finish(absl::InternalError(absl::StrCat("rank 0 returned ", result.outputs_size(),
                                                 " results for ", batch.size(), " requests")));
    }
    return false;
  }
  const v1::OutputFormat format = run.output_format() == v1::OUTPUT_FORMAT_UNSPECIFIED
                                      ? v1::OUTPUT_FORMAT_PNG
                                      : run.output_format();
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& r = batch[i];
    worker::v1::RunOutput& output = *result.mutable_outputs(static_cast<int>(i));
    v1::GenerateResponse resp;
    resp.set_request_id(r->id());
    resp.set_format(format);
    resp.set_height(run.height());
    resp.set_width(run.width());
    resp.set_seed(run.items(static_cast<int>(i)).seed());
    resp.set_num_inference_steps(run.num_inference_steps());
    if (format == v1::OUTPUT_FORMAT_LATENTS) {
      *resp.mutable_latents() = std::move(*output.mutable_latents());
    } else {
      resp.set_image(std::move(*output.mutable_image()));
    }
    v1::Timings* t = resp.mutable_timings();
    t->set_queue_seconds(SecondsBetween(r->enqueued_at(), start));
    t->set_encode_seconds(result.encode_seconds());
    t->set_denoise_seconds(result.denoise_seconds());
    t->set_decode_seconds(result.decode_seconds());
    t->set_total_seconds(SecondsBetween(r->enqueued_at(), end));
    t->set_full_steps(result.full_steps());  // the job's passes, every request of the batch alike
    t->set_cached_steps(result.cached_steps());
    r->Finish(absl::OkStatus(), std::move(resp));
  }
  return true;
}

}  // namespace

Dispatcher::Dispatcher(AdmissionQueue* queue, WorkerGroup* group, size_t max_batch,
                       DispatchObserver observer)
    : queue_(queue), group_(group), max_batch_(max_batch), observer_(std::move(observer)) {
  readiness_listener_ = group_->AddReadinessListener([this](bool) { wakeup_.Notify(); });
}

Dispatcher::~Dispatcher() {
  Join();
  group_->RemoveReadinessListener(readiness_listener_);
}

void Dispatcher::Start() {
  {
    std::lock_guard<std::mutex> lock(batch_mu_);
    running_ = true;
  }
  thread_ = std::thread([this] {
    Loop();
    {
      std::lock_guard<std::mutex> lock(batch_mu_);
      running_ = false;
    }
    stopped_cv_.notify_all();
  });
}

bool Dispatcher::WaitUntilStopped(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(batch_mu_);
  return stopped_cv_.wait_until(lock, until, [&] { return !running_; });
}

void Dispatcher::Join() {
  if (thread_.joinable()) thread_.join();
}

void Dispatcher::CancelRunning(const absl::Status& why) {
  std::vector<std::shared_ptr<PendingRequest>> batch;
  {
    std::lock_guard<std::mutex> lock(batch_mu_);
    batch = batch_;
  }
  for (const auto& r : batch) r->Cancel(why);  // each notifies wakeup_ through its listener
}

void Dispatcher::Loop() {
  while (true) {
    auto batch = queue_->PopBatch(max_batch_);
    if (batch.empty()) return;  // closed
    busy_.store(true);
    {
      std::lock_guard<std::mutex> lock(batch_mu_);
      batch_ = batch;
    }
    for (const auto& r : batch) r->SetCancelListener([this] { wakeup_.Notify(); });
    RunBatch(batch);
    for (const auto& r : batch) r->SetCancelListener({});
    {
      std::lock_guard<std::mutex> lock(batch_mu_);
      batch_.clear();
    }
    busy_.store(false);
  }
}

void Dispatcher::RunBatch(const std::vector<std::shared_ptr<PendingRequest>>& batch) {
  auto all_cancelled = [&] { return AllCancelled(batch); };
  // The job is worth running until the last request's deadline.
  const Clock::time_point last_deadline = LastDeadline(batch);

  // Wait for the group (it may be re-forming after a failure) as long as a client still waits.
  wakeup_.WaitUntil(last_deadline, [&] { return group_->ready() || all_cancelled(); });
  const Clock::time_point start = Clock::now();
  for (const auto& r : batch) {
    if (observer_.on_start) observer_.on_start(*r, SecondsBetween(r->enqueued_at(), start));
  }
  if (all_cancelled()) {
    for (const auto& r : batch) {
      r->CancelIfExpired();
      if (observer_.on_dropped) observer_.on_dropped(*r, r->status());
    }
    return;
  }

  const worker::v1::RunRequest run = MakeRunRequest(batch, ++job_counter_);
  const RequestShape& shape = batch.front()->request().shape;
  spdlog::info("job {}: {} request(s), {}x{}, {} steps{}{}{}", run.job_id(), batch.size(),
               shape.width, shape.height, shape.steps, LorasText(shape),
               shape.input_images ? absl::StrCat(", ", shape.input_images, " input image(s)")
                                  : std::string(),
               shape.cache_threshold > 0 ? absl::StrCat(", step cache ", shape.cache_threshold)
                                         : std::string());

  RunControl control;
  control.on_progress = [&](const worker::v1::StepProgress& p) {
    RelayProgress(batch, p, observer_);
  };
  control.should_cancel = all_cancelled;
  control.wakeup = &wakeup_;
  control.cancel_at = last_deadline;
  auto result = group_->Run(run, control);
  const Clock::time_point end = Clock::now();

  if (!result.ok()) {
    spdlog::warn("job {}: {}", run.job_id(), result.status().ToString());
    for (const auto& r : batch) {
      // A cancelled request already carries its reason (client, deadline, drain); the others
      // get the job's status.
      r->CancelIfExpired(end);
      r->Finish(result.status());
    }
    return;
  }
  const uint32_t full = result->full_steps(), cached = result->cached_steps();
  if (!FinishBatch(batch, run, *std::move(result), start, end)) return;
  spdlog::info(
      "job {}: done in {:.3f} s{}", run.job_id(), SecondsBetween(start, end),
      cached > 0 ? absl::StrCat(" (", full, " full, ", cached, " cached passes)") : std::string());
}

}  // namespace ditserve::server
