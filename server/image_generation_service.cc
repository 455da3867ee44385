#include "server/image_generation_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"

namespace ditserve::server {
namespace {

// gRPC's sync API has no notification for a client that cancels or goes away: the handler looks
// at ServerContext::IsCancelled() this often while it waits (everything else wakes it).
constexpr auto kClientCheckInterval = std::chrono::milliseconds(50);
// gRPC cancels the call at the client's deadline on its own (millisecond) timer, possibly just
// before our steady-clock mapping of the same deadline passes; within this margin a cancelled
// call is counted as expired.
constexpr auto kDeadlineSlack = std::chrono::milliseconds(20);

}  // namespace

void ApplyServerDefaults(const FrontendOptions& options, worker::v1::ModelDescription* model) {
  auto* d = model->mutable_defaults();
  if (options.default_height) d->set_height(static_cast<uint32_t>(options.default_height));
  if (options.default_width) d->set_width(static_cast<uint32_t>(options.default_width));
  if (options.default_steps) d->set_num_inference_steps(static_cast<uint32_t>(options.default_steps));
}

ImageGenerationService::ImageGenerationService(const FrontendOptions* options,
                                               AdmissionQueue* queue, WorkerGroup* group,
                                               RequestObserver observer,
                                               std::shared_ptr<const ApiSecurity> security)
    : options_(options),
      queue_(queue),
      group_(group),
      observer_(std::move(observer)),
      security_(std::move(security)) {}

absl::Status ImageGenerationService::Authorize(const grpc::ServerContext& ctx) const {
  if (!security_ || !security_->token_required()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  return security_->Check(it == md.end() ? absl::string_view()
                                         : absl::string_view(it->second.data(), it->second.size()));
}

std::string ImageGenerationService::NewRequestId() {
  static const uint32_t prefix = std::random_device{}();
  return absl::StrFormat("r%08x-%06d", prefix, counter_.fetch_add(1) + 1);
}

absl::Status ImageGenerationService::Serve(
    grpc::ServerContext* ctx, const v1::GenerateRequest& req, bool streaming,
    const std::function<bool(const v1::GenerateEvent&)>& emit, v1::GenerateResponse* resp) {
  const auto start = Clock::now();
  const Deadline deadline =
      Deadline::ForClient(ctx->deadline(),
                          std::chrono::duration<double>(options_->default_timeout_seconds), start,
                          std::chrono::system_clock::now());
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
  auto pending = std::make_shared<PendingRequest>(id, std::move(*validated), deadline);
  // Counted before it is queued, so "nothing in flight" also means "nothing queued" (drain).
  in_flight_.fetch_add(1);
  if (absl::Status s = queue_->Push(pending); !s.ok()) {
    EndInFlight();
    spdlog::warn("req={} rejected: {}", id, s.ToString());
    return finish(s, false);
  }
  admitted = true;
  if (observer_.on_admitted) observer_.on_admitted();
  spdlog::info("req={} admitted ({}x{}, {} steps, seed {})", id,
               pending->request().shape.width, pending->request().shape.height,
               pending->request().shape.steps, pending->request().item.seed());

  v1::GenerateEvent queued;
  queued.mutable_queued()->set_position(std::max(0, queue_->Position(*pending)));
  bool client_gone = !emit(queued);
  bool first_step = true;
  while (true) {
    if (!pending->done()) {
      const Clock::time_point now = Clock::now();
      if (deadline.expired(now) ||
          (ctx->IsCancelled() && deadline.expired(now + kDeadlineSlack))) {
        pending->Cancel(deadline.ExceededError(now));
        queue_->DropCancelled();  // frees its queue slot at once if it was still queued
      } else if (client_gone || ctx->IsCancelled()) {
        pending->Cancel(absl::CancelledError("cancelled by the client"));
        queue_->DropCancelled();
      }
    }
    // Events, the result and any cancellation (the dispatcher's, the drain's) wake this at once;
    // the request's own deadline is waited for exactly.
    auto ev = pending->WaitForEvent(
        std::min(deadline.when(), Clock::now() + kClientCheckInterval));
    if (ev) {
      if (first_step && ev->has_progress() && observer_.on_first_step) {
        observer_.on_first_step(std::chrono::duration<double>(Clock::now() - start).count());
        first_step = false;
      }
      if (!emit(*ev)) client_gone = true;
      continue;
    }
    if (pending->done()) break;
  }
  absl::Status status = pending->status();
  if (status.ok()) *resp = pending->TakeResponse();
  EndInFlight();
  spdlog::info("req={} finished: {}", id, status.ok() ? "OK" : status.ToString());
  return finish(status, status.ok());
}

void ImageGenerationService::EndInFlight() {
  {
    std::lock_guard<std::mutex> lock(idle_mu_);
    in_flight_.fetch_sub(1);
  }
  idle_cv_.notify_all();
}

bool ImageGenerationService::WaitUntilIdle(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(idle_mu_);
  return idle_cv_.wait_until(lock, until, [&] { return in_flight_.load() == 0; });
}

grpc::Status ImageGenerationService::Generate(grpc::ServerContext* ctx,
                                              const v1::GenerateRequest* req,
                                              v1::GenerateResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  return ToGrpcStatus(Serve(ctx, *req, /*streaming=*/false, [](const v1::GenerateEvent&) { return true; }, resp));
}

grpc::Status ImageGenerationService::GenerateStream(grpc::ServerContext* ctx,
                                                    const v1::GenerateRequest* req,
                                                    grpc::ServerWriter<v1::GenerateEvent>* writer) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  v1::GenerateResponse resp;
  absl::Status s = Serve(
      ctx, *req, /*streaming=*/true, [&](const v1::GenerateEvent& ev) { return writer->Write(ev); }, &resp);
  if (!s.ok()) return ToGrpcStatus(s);
  v1::GenerateEvent last;
  *last.mutable_result() = std::move(resp);
  if (!writer->Write(last)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  return grpc::Status::OK;
}

grpc::Status ImageGenerationService::GetModelInfo(grpc::ServerContext* ctx,
                                                  const v1::GetModelInfoRequest*,
                                                  v1::ModelInfo* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
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
