#include "server/image_generation_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "server/health_reason.h"

namespace ditserve::server {
namespace {

// gRPC's sync API has no notification for a client that cancels or goes away: the handler looks
// at ServerContext::IsCancelled() this often while it waits (everything else wakes it).
constexpr auto kClientCheckInterval = std::chrono::milliseconds(50);
// gRPC cancels the call at the client's deadline on its own (millisecond) timer, possibly just
// before our steady-clock mapping of the same deadline passes; within this margin a cancelled
// call is counted as expired.
constexpr auto kDeadlineSlack = std::chrono::milliseconds(20);

// A gRPC call as Serve sees it.
class GrpcCallContext final : public CallContext {
 public:
  explicit GrpcCallContext(const grpc::ServerContext* ctx) : ctx_(ctx) {}
  std::chrono::system_clock::time_point deadline() const override { return ctx_->deadline(); }
  bool IsCancelled() const override { return ctx_->IsCancelled(); }

 private:
  const grpc::ServerContext* const ctx_;
};

using PendingList = std::vector<std::shared_ptr<PendingRequest>>;

// Why a call's requests must be cancelled now (OK: they need not be): the deadline, the client,
// or, with several images, one that failed on its own (recorded in `failure`, once).
absl::Status WhyCancel(const CallContext& ctx, const Deadline& deadline, bool client_gone,
                       const PendingList& pending, absl::Status* failure) {
  const Clock::time_point now = Clock::now();
  if (deadline.expired(now) || (ctx.IsCancelled() && deadline.expired(now + kDeadlineSlack))) {
    return deadline.ExceededError(now);
  }
  if (client_gone || ctx.IsCancelled()) return absl::CancelledError("cancelled by the client");
  if (pending.size() > 1 && failure->ok()) {
    for (const auto& p : pending) {
      if (p->done() && !p->status().ok()) {
        *failure = p->status();
        return absl::CancelledError(
            absl::StrCat("another image of the same call failed: ", failure->ToString()));
      }
    }
  }
  return absl::OkStatus();
}

// The status of a call whose requests have all finished: the request that failed on its own
// first (`failure`), else the first one that did not succeed.
absl::Status CallStatus(const absl::Status& failure, const PendingList& pending) {
  absl::Status status = failure;
  for (const auto& p : pending) {
    if (!status.ok()) break;
    status = p->status();
  }
  return status;
}

// Whether two requests carry the same input images and strength (then they decode alike).
bool SameImages(const v1::GenerateRequest& a, const v1::GenerateRequest& b) {
  return a.strength() == b.strength() && a.images_size() == b.images_size() &&
         std::equal(a.images().begin(), a.images().end(), b.images().begin());
}

}  // namespace

void ApplyServerDefaults(const FrontendOptions& options, worker::v1::ModelDescription* model) {
  auto* d = model->mutable_defaults();
  if (options.default_height) d->set_height(static_cast<uint32_t>(options.default_height));
  if (options.default_width) d->set_width(static_cast<uint32_t>(options.default_width));
  if (options.default_steps)
    d->set_num_inference_steps(static_cast<uint32_t>(options.default_steps));
  // The step cache's default: the flag's, within what the model offers (0 when it offers none).
  v1::StepCache* cache = model->mutable_step_cache();
  cache->set_default_threshold(
      std::clamp(options.default_cache_threshold, 0.0, std::max(0.0, cache->max_threshold())));
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

std::string ImageGenerationService::NewRequestId(char kind) {
  static const uint32_t prefix = std::random_device{}();
  return absl::StrFormat("%c%08x-%06d", kind, prefix, counter_.fetch_add(1) + 1);
}

void ImageGenerationService::RecordRefused(ApiMethod method, const absl::Status& status,
                                           Clock::time_point arrived) {
  if (observer_.on_finished) {
    observer_.on_finished(method, /*admitted=*/false, status,
                          std::chrono::duration<double>(Clock::now() - arrived).count(), 0);
  }
}

absl::StatusOr<std::vector<v1::GenerateResponse>> ImageGenerationService::Serve(
    const CallContext& ctx, ApiMethod method, const std::vector<v1::GenerateRequest>& requests,
    const std::function<bool(const v1::GenerateEvent&)>& emit) {
  const auto start = Clock::now();
  const Deadline deadline = Deadline::ForClient(
      ctx.deadline(), std::chrono::duration<double>(options_->default_timeout_seconds), start,
      std::chrono::system_clock::now());
  bool admitted = false;
  auto finish = [&](absl::Status s, int images) {
    if (observer_.on_finished) {
      observer_.on_finished(method, admitted, s,
                            std::chrono::duration<double>(Clock::now() - start).count(), images);
    }
    return s;
  };
  absl::StatusOr<PreparedCall> call = Prepare(requests, deadline, /*streaming=*/bool(emit));
  if (!call.ok()) return finish(call.status(), 0);
  const std::string& id = call->id;
  const PendingList& pending = call->pending;
  if (absl::Status s = Admit(id, pending); !s.ok()) return finish(s, 0);
  admitted = true;

  const absl::Status status = Await(ctx, deadline, start, pending, emit);
  std::vector<v1::GenerateResponse> responses;
  if (status.ok()) {
    responses.reserve(pending.size());
    for (const auto& p : pending) responses.push_back(p->TakeResponse());
  }
  EndInFlight();
  spdlog::info("req={} finished: {}", id, status.ok() ? "OK" : status.ToString());
  if (!status.ok()) return finish(status, 0);
  finish(status, static_cast<int>(responses.size())).IgnoreError();
  return responses;
}

absl::StatusOr<ImageGenerationService::PreparedCall> ImageGenerationService::Prepare(
    const std::vector<v1::GenerateRequest>& requests, const Deadline& deadline, bool streaming) {
  if (requests.empty()) return absl::InvalidArgumentError("no image requested");
  if (draining_.load()) return absl::UnavailableError("server is shutting down");
  auto model = group_->model();
  if (!group_->ready() || !model) {
    return absl::UnavailableError(
        "the model is not ready (workers are loading or the group is re-forming); retry later");
  }
  ApplyServerDefaults(*options_, &*model);
  PreparedCall call;
  call.id = requests.front().request_id().empty() ? NewRequestId() : requests.front().request_id();
  call.pending.reserve(requests.size());
  // The input images are decoded here, on the caller's thread, before admission (CPU work that
  // must not reach the dispatcher); later requests of the call that carry the same images as the
  // first (the HTTP edits' `n`) share its decode.
  std::optional<DecodedInputImages> first_images;
  for (size_t i = 0; i < requests.size(); ++i) {
    const v1::GenerateRequest& r = requests[i];
    std::optional<DecodedInputImages> own;
    if (!first_images || !SameImages(r, requests.front())) {
      ASSIGN_OR_RETURN(own, DecodeInputImages(r, *model, options_->limits));
    }
    ASSIGN_OR_RETURN(ValidatedRequest validated,
                     ValidateRequest(r, *model, options_->limits, own ? *own : *first_images));
    if (i == 0) first_images = std::move(own);
    // Previews travel on the call's event stream, which carries the first request's events only.
    if (!streaming || i > 0) validated.shape.preview_images = 0;
    // One image keeps the call's id; several are told apart by their index.
    call.pending.push_back(std::make_shared<PendingRequest>(
        requests.size() == 1 ? call.id : absl::StrCat(call.id, ".", i), std::move(validated),
        deadline));
  }
  return call;
}

absl::Status ImageGenerationService::Admit(const std::string& id, const PendingList& pending) {
  // Counted before it is queued, so "nothing in flight" also means "nothing queued" (drain).
  in_flight_.fetch_add(1);
  if (absl::Status s = queue_->PushAll(pending); !s.ok()) {
    EndInFlight();
    spdlog::warn("req={} rejected: {}", id, s.ToString());
    return s;
  }
  if (observer_.on_admitted) observer_.on_admitted();
  const auto& shape = pending.front()->request().shape;
  spdlog::info("req={} admitted ({}x{}, {} steps, seed {}{})", id, shape.width, shape.height,
               shape.steps, pending.front()->request().item.seed(),
               pending.size() == 1 ? std::string() : absl::StrCat(", ", pending.size(), " images"));
  return absl::OkStatus();
}

absl::Status ImageGenerationService::Await(
    const CallContext& ctx, const Deadline& deadline, Clock::time_point start,
    const PendingList& pending, const std::function<bool(const v1::GenerateEvent&)>& emit) {
  auto send = [&](const v1::GenerateEvent& ev) { return !emit || emit(ev); };
  v1::GenerateEvent queued;
  queued.mutable_queued()->set_position(std::max(0, queue_->Position(*pending.front())));
  bool client_gone = !send(queued);
  bool first_step = true;
  absl::Status failure;  // the first request that failed on its own: the call's status
  size_t current = 0;    // the request whose events are read now (only the first one's are sent)
  while (current < pending.size()) {
    const absl::Status cancel = WhyCancel(ctx, deadline, client_gone, pending, &failure);
    if (!cancel.ok()) CancelUnfinished(pending, cancel);
    // Events, the result and any cancellation (the dispatcher's, the drain's) wake this at once;
    // the request's own deadline is waited for exactly.
    auto ev = pending[current]->WaitForEvent(
        std::min(deadline.when(), Clock::now() + kClientCheckInterval));
    if (ev) {
      if (current != 0) continue;  // the other images' events duplicate the first one's
      if (first_step && ev->has_progress() && observer_.on_first_step) {
        observer_.on_first_step(std::chrono::duration<double>(Clock::now() - start).count());
        first_step = false;
      }
      if (!send(*ev)) client_gone = true;
      continue;
    }
    if (pending[current]->done()) ++current;
  }
  return CallStatus(failure, pending);
}

void ImageGenerationService::CancelUnfinished(const PendingList& pending, const absl::Status& why) {
  bool any = false;
  for (const auto& p : pending) {
    if (!p->done()) {
      p->Cancel(why);
      any = true;
    }
  }
  // Frees the slots of those still queued at once.
  if (any) queue_->DropCancelled();
}

absl::StatusOr<v1::ModelInfo> ImageGenerationService::ModelInfo() const {
  auto model = group_->model();
  if (!model) return absl::UnavailableError("the model is still loading");
  ApplyServerDefaults(*options_, &*model);
  v1::ModelInfo info =
      MakeModelInfo(*model, options_->limits, options_->max_queue, options_->max_batch);
  info.set_tp_degree(group_->world_size());
  return info;
}

bool ImageGenerationService::serving() const {
  return !draining_.load() && group_->ready();
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
  auto out = Serve(GrpcCallContext(ctx), ApiMethod::kGenerate, {*req}, nullptr);
  if (!out.ok()) return ToGrpcStatus(out.status());
  *resp = std::move(out->front());
  return grpc::Status::OK;
}

grpc::Status ImageGenerationService::GenerateStream(grpc::ServerContext* ctx,
                                                    const v1::GenerateRequest* req,
                                                    grpc::ServerWriter<v1::GenerateEvent>* writer) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  auto out = Serve(GrpcCallContext(ctx), ApiMethod::kGenerateStream, {*req},
                   [&](const v1::GenerateEvent& ev) { return writer->Write(ev); });
  if (!out.ok()) return ToGrpcStatus(out.status());
  v1::GenerateEvent last;
  *last.mutable_result() = std::move(out->front());
  if (!writer->Write(last)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  return grpc::Status::OK;
}

grpc::Status ImageGenerationService::GetModelInfo(grpc::ServerContext* ctx,
                                                  const v1::GetModelInfoRequest*,
                                                  v1::ModelInfo* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  auto info = ModelInfo();
  // Not serving because the worker group could not be formed: say why (with the model's
  // description when one was loaded before, else the group's size alone), not "still loading".
  const std::optional<v1::NotServingReason> reason = NotServingReasonOf(*group_);
  if (!info.ok() && !reason) return ToGrpcStatus(info.status());
  if (info.ok()) {
    *resp = *std::move(info);
  } else {
    resp->set_version(DITSERVE_VERSION);
    resp->set_tp_degree(group_->world_size());
  }
  if (reason) *resp->mutable_not_serving_reason() = *reason;
  return grpc::Status::OK;
}

}  // namespace ditserve::server
