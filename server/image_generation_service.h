// The public ditserve.v1.ImageGeneration service, and the one generation path every public API
// shares (Serve): the gRPC calls here and the HTTP API (server/http_api.h) both go through it.
// Serve validates, maps the client's deadline once (Deadline), admits into the queue, and waits for
// the request to finish while watching the client and the deadline; the gRPC handlers convert
// absl::Status to grpc::Status once, here (the HTTP API has its own edge).
//
// The calling thread is its request's deadline timer: it sleeps until an event, the end of the
// request, or the deadline (then cancels the request with the Deadline's DEADLINE_EXCEEDED, which
// stops the job on the ranks through the dispatcher). The one periodic wake-up left is the client
// check every 50 ms: neither gRPC's sync API nor cpp-httplib announces a client's cancellation.
//
// Threads: gRPC's sync server threads and the HTTP API's threads call in concurrently; every member
// they use is thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include <vector>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.grpc.pb.h"
#include "server/admission_queue.h"
#include "server/api_security.h"
#include "server/call_context.h"
#include "server/frontend_options.h"
#include "server/worker_group.h"

namespace ditserve::server {

// Which public call a generation came through (the metrics' method label).
enum class ApiMethod {
  kGenerate,           // gRPC ImageGeneration/Generate
  kGenerateStream,     // gRPC ImageGeneration/GenerateStream
  kImagesGenerations,  // HTTP POST /v1/images/generations
  kImagesEdits,        // HTTP POST /v1/images/edits
};

// Metric hooks; every member may be empty.
struct RequestObserver {
  std::function<void()> on_admitted;
  // Called once per finished generation call: which call, whether it had been admitted (counted
  // by on_admitted), its final status and end-to-end seconds, and how many images it returned.
  std::function<void(ApiMethod method, bool admitted, const absl::Status&, double seconds,
                     int images)>
      on_finished;
  std::function<void(double seconds)> on_first_step;
};

// Overrides the model's request defaults with the --default-* flags that are set, and sets
// step_cache.default_threshold to --default-cache-threshold, at most step_cache.max_threshold.
void ApplyServerDefaults(const FrontendOptions& options, worker::v1::ModelDescription* model);

class ImageGenerationService final : public v1::ImageGeneration::Service {
 public:
  // `security` null: no token is asked for.
  ImageGenerationService(const FrontendOptions* options, AdmissionQueue* queue, WorkerGroup* group,
                         RequestObserver observer = {},
                         std::shared_ptr<const ApiSecurity> security = nullptr);

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        v1::GenerateResponse* resp) override;
  grpc::Status GenerateStream(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                              grpc::ServerWriter<v1::GenerateEvent>* writer) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req,
                            v1::ModelInfo* resp) override;

  // The shared generation path. `requests` are the images of one call (the gRPC calls: one; the
  // HTTP API: its `n`, each with its own seed): each is validated, then all are admitted together
  // or none is (AdmissionQueue::PushAll), under one Deadline from `ctx` and --default-timeout.
  // Waits until every one has finished, the deadline passes or the client goes away (then the
  // requests are cancelled, stopping their job on the ranks); when one fails, the others are
  // cancelled and its status is the call's. `emit` (may be empty) receives the first request's
  // events as they happen (queued, progress); returning false means the client went away. Returns
  // the responses in the order of `requests`. Reports the call to the observer once.
  absl::StatusOr<std::vector<v1::GenerateResponse>> Serve(
      const CallContext& ctx, ApiMethod method, const std::vector<v1::GenerateRequest>& requests,
      const std::function<bool(const v1::GenerateEvent&)>& emit);
  // Reports a call that a transport refused before Serve (the HTTP API's malformed bodies) to the
  // observer, as not admitted, so every call is counted once.
  void RecordRefused(ApiMethod method, const absl::Status& status, Clock::time_point arrived);
  // The public ModelInfo (the served model with the --default-* flags, the limits, the group's tp
  // degree); UNAVAILABLE while the model is still loading.
  absl::StatusOr<v1::ModelInfo> ModelInfo() const;
  // What grpc.health.v1 reports as SERVING: the group is ready and the server is not draining.
  bool serving() const;

  // New requests get UNAVAILABLE from now on (graceful shutdown).
  void StartDraining() { draining_.store(true); }
  // Requests admitted (queued or running) and not yet finished.
  int in_flight() const { return in_flight_.load(); }
  // Waits until nothing is in flight or `until`; returns whether nothing is. Woken by each
  // request's end, no polling.
  bool WaitUntilIdle(Clock::time_point until);
  // A new call id (`kind` + the process's random prefix + a counter): "r", what a call without a
  // request_id gets; a transport that logs about a call before Serve sets one itself so both
  // lines share it (the HTTP API's calls naming their `user`: "u"). Thread-safe.
  std::string NewRequestId(char kind = 'r');

 private:
  // UNAUTHENTICATED unless the call carries the bearer token (when one is required).
  absl::Status Authorize(const grpc::ServerContext& ctx) const;
  void EndInFlight();

  // Serve's steps, in order.
  using PendingList = std::vector<std::shared_ptr<PendingRequest>>;
  struct PreparedCall {
    std::string id;       // the call's id (the client's request_id, or a new one)
    PendingList pending;  // its requests, validated, in the order of the call's
  };
  // Refuses a call without images or one the server cannot take now (draining, model not ready),
  // gives it its id and validates every request, decoding and preparing its input images here, on
  // the caller's thread (server/input_images.h); none is queued yet. Previews
  // (preview_images) are kept only for the first request of a `streaming` call.
  absl::StatusOr<PreparedCall> Prepare(const std::vector<v1::GenerateRequest>& requests,
                                       const Deadline& deadline, bool streaming);
  // Counts the call in flight and queues its requests together (AdmissionQueue::PushAll); on
  // refusal, nothing stays counted. Tells the observer it was admitted.
  absl::Status Admit(const std::string& id, const PendingList& pending);
  // Sends the first request's events to `emit` until every request has finished, cancelling
  // those not finished at the deadline, when the client goes away, or when one fails on its own.
  // Returns the call's status.
  absl::Status Await(const CallContext& ctx, const Deadline& deadline, Clock::time_point start,
                     const PendingList& pending,
                     const std::function<bool(const v1::GenerateEvent&)>& emit);
  // Cancels every request not finished with `why` and frees the queue slots they held.
  void CancelUnfinished(const PendingList& pending, const absl::Status& why);

  const FrontendOptions* const options_;
  AdmissionQueue* const queue_;
  WorkerGroup* const group_;
  const RequestObserver observer_;
  const std::shared_ptr<const ApiSecurity> security_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::mutex idle_mu_;  // orders in_flight_ decrements with WaitUntilIdle
  std::condition_variable idle_cv_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace ditserve::server
