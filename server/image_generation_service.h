// The public ditserve.v1.ImageGeneration service: a thin RPC edge. It validates, maps the
// client's deadline once (Deadline), admits into the queue, and waits for the request to finish
// while watching the client and the deadline, and converts absl::Status to grpc::Status once,
// here.
//
// The handler is its request's deadline timer: it sleeps until an event, the end of the request,
// or the deadline (then cancels the request with the Deadline's DEADLINE_EXCEEDED, which stops
// the job on the ranks through the dispatcher). The one periodic wake-up left is the client
// check every 50 ms: gRPC's sync API does not announce a client's cancellation.
//
// Threads: gRPC's sync server threads call the handlers concurrently; every member they use is
// thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "server/admission_queue.h"
#include "server/api_security.h"
#include "server/frontend_options.h"
#include "server/worker_group.h"

namespace ditserve::server {

// Metric hooks; every member may be empty.
struct RequestObserver {
  std::function<void()> on_admitted;
  // Called once per finished generation RPC: which call, whether it had been admitted (counted
  // by on_admitted), its final status and end-to-end seconds, and whether it returned an image.
  std::function<void(bool streaming, bool admitted, const absl::Status&, double seconds,
                     bool produced_image)>
      on_finished;
  std::function<void(double seconds)> on_first_step;
};

// Overrides the model's request defaults with the --default-* flags that are set.
void ApplyServerDefaults(const FrontendOptions& options, worker::v1::ModelDescription* model);

class ImageGenerationService final : public v1::ImageGeneration::Service {
 public:
  // `security` null: no token is asked for.
  ImageGenerationService(const FrontendOptions* options, AdmissionQueue* queue,
                         WorkerGroup* group, RequestObserver observer = {},
                         std::shared_ptr<const ApiSecurity> security = nullptr);

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        v1::GenerateResponse* resp) override;
  grpc::Status GenerateStream(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                              grpc::ServerWriter<v1::GenerateEvent>* writer) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req,
                            v1::ModelInfo* resp) override;

  // New requests get UNAVAILABLE from now on (graceful shutdown).
  void StartDraining() { draining_.store(true); }
  // Requests admitted (queued or running) and not yet finished.
  int in_flight() const { return in_flight_.load(); }
  // Waits until nothing is in flight or `until`; returns whether nothing is. Woken by each
  // request's end, no polling.
  bool WaitUntilIdle(Clock::time_point until);

 private:
  // Shared by both calls. `emit` receives each event as it happens (streaming); returns the final
  // status and, on success, the response.
  absl::Status Serve(grpc::ServerContext* ctx, const v1::GenerateRequest& req, bool streaming,
                     const std::function<bool(const v1::GenerateEvent&)>& emit,
                     v1::GenerateResponse* resp);
  // UNAUTHENTICATED unless the call carries the bearer token (when one is required).
  absl::Status Authorize(const grpc::ServerContext& ctx) const;
  std::string NewRequestId();
  void EndInFlight();

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
