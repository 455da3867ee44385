#include "server/image_generation_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"

namespace ditserve::server {
namespace {

Clock::time_point SteadyDeadline(grpc::ServerContext* ctx, double default_seconds) {
  const auto now_sys = std::chrono::system_clock::now();
  const auto default_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(default_seconds));
  const auto client = ctx->deadline();
  if (client >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return default_deadline;
  }
  return std::min(default_deadline, Clock::now() + (client - now_sys));
}

}  // namespace

void ApplyServerDefaults(const FrontendOptions& options, worker::v1::ModelDescription* model) {
  auto* d = model->mutable_defaults();
  if (options.default_height) d->set_height(static_cast<uint32_t>(options.default_height));
  if (options.default_width) d->set_width(static_cast<uint32_t>(options.default_width));
  if (options.default_steps) d->set_num_inference_steps(static_cast<uint32_t>(options.default_steps));
}

ImageGenerationService::ImageGenerationService(const FrontendOptions* options,
                                               AdmissionQueue* queue, WorkerGroup* group,
                                               RequestObserver observer)
    : options_(options), queue_(queue), group_(group), observer_(std::move(observer)) {}

std::string ImageGenerationService::NewRequestId() {
  static const uint32_t prefix = std::random_device{}();
  return absl::StrFormat("r%08x-%06d", prefix, counter_.fetch_add(1) + 1);
}

absl::Status ImageGenerationService::Serve(
    grpc::ServerContext* ctx, const v1::GenerateRequest& req, bool streaming,
    const std::function<bool(const v1::GenerateEvent&)>& emit, v1::GenerateResponse* resp) {
  const auto start = Clock::now();
  bool admitted = false;
  auto finish = [&](absl::Status s, bool image) {
    if (observer_.on_finished) {
      observer_.on_finished(streaming, admitted, s,
                            std::chrono::duration<double>(Clock::now() - start).count(), image);
    }
    return s;
  };
  if (draining_.load()) return finish(absl::UnavailableError("server is shutting down"), false);
  auto model = group_->model();
  if (!group_->ready() || !model) {
    return finish(absl::UnavailableError(
                      "the model is not ready (workers are loading or the group is re-forming); "
                      "retry later"),
                  false);
  }
  ApplyServerDefaults(*options_, &*model);
  auto validated = ValidateRequest(req, *model, options_->limits);
  if (!validated.ok()) return finish(validated.status(), false);

  const std::string id = req.request_id().empty() ? NewRequestId() : req.request_id();
  auto pending = std::make_shared<PendingRequest>(
      id, std::move(*validated), SteadyDeadline(ctx, options_->default_timeout_seconds));
  if (absl::Status s = queue_->Push(pending); !s.ok()) {
    spdlog::warn("req={} rejected: {}", id, s.ToString());
    return finish(s, false);
  }
  in_flight_.fetch_add(1);
  admitted = true;
  if (observer_.on_admitted) observer_.on_admitted();
  spdlog::info("req={} admitted ({}x{}, {} steps, seed {})", id,
               pending->request().shape.width, pending->request().shape.height,
               pending->request().shape.steps, pending->request().item.seed());

  v1::GenerateEvent queued;
  queued.mutable_queued()->set_position(std::max(0, queue_->Position(*pending)));
  bool client_gone = !emit(queued);
  bool first_step = true;
  absl::Status status;
  while (true) {
    if (client_gone || ctx->IsCancelled()) {
      pending->Cancel();
      queue_->DropCancelled();
      status = absl::CancelledError("cancelled by the client");
      break;
    }
    if (Clock::now() >= pending->deadline() && !pending->done()) {
      pending->Cancel();
      queue_->DropCancelled();
      status = absl::DeadlineExceededError(absl::StrCat(
          "deadline exceeded after ",
          absl::StrFormat("%.3f", std::chrono::duration<double>(Clock::now() - start).count()),
          " s"));
      break;
    }
    auto ev = pending->WaitForEvent(Clock::now() + std::chrono::milliseconds(50));
    if (ev) {
      if (first_step && ev->has_progress() && observer_.on_first_step) {
        observer_.on_first_step(std::chrono::duration<double>(Clock::now() - start).count());
        first_step = false;
      }
      if (!emit(*ev)) client_gone = true;
      continue;
    }
    if (pending->done()) {
      status = pending->status();
      if (status.ok()) *resp = pending->TakeResponse();
      break;
    }
  }
  in_flight_.fetch_sub(1);
  spdlog::info("req={} finished: {}", id, status.ok() ? "OK" : status.ToString());
  return finish(status, status.ok());
}

grpc::Status ImageGenerationService::Generate(grpc::ServerContext* ctx,
                                              const v1::GenerateRequest* req,
                                              v1::GenerateResponse* resp) {
  return ToGrpcStatus(Serve(ctx, *req, /*streaming=*/false, [](const v1::GenerateEvent&) { return true; }, resp));
}

grpc::Status ImageGenerationService::GenerateStream(grpc::ServerContext* ctx,
                                                    const v1::GenerateRequest* req,
                                                    grpc::ServerWriter<v1::GenerateEvent>* writer) {
  v1::GenerateResponse resp;
  absl::Status s = Serve(
      ctx, *req, /*streaming=*/true, [&](const v1::GenerateEvent& ev) { return writer->Write(ev); }, &resp);
  if (!s.ok()) return ToGrpcStatus(s);
  v1::GenerateEvent last;
  *last.mutable_result() = std::move(resp);
  if (!writer->Write(last)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  return grpc::Status::OK;
}

grpc::Status ImageGenerationService::GetModelInfo(grpc::ServerContext*,
                                                  const v1::GetModelInfoRequest*,
                                                  v1::ModelInfo* resp) {
  auto model = group_->model();
  if (!model) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is still loading");
  }
  ApplyServerDefaults(*options_, &*model);
  *resp = MakeModelInfo(*model, options_->limits, options_->max_queue, options_->max_batch);
  resp->set_tp_degree(group_->world_size());
  return grpc::Status::OK;
}

}  // namespace ditserve::server
