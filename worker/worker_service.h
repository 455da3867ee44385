// The internal ditserve.worker.v1.Worker service: a thin gRPC edge over Engine. absl::Status is
// converted to grpc::Status here and nowhere else. gRPC's sync server threads call the handlers;
// Engine serialises the jobs. Init and Run decode the request (job_codec.h), submit the job and,
// on the handler's own thread, write the progress the engine thread queued (progress_queue.h: a
// stalled client loses intermediate progress, never the device's time) until the job ends, then
// the final event. Only rank 0 streams step progress (the frontend reads rank 0's); every rank
// sends its final event.
#pragma once

#include <functional>

#include "ditserve/worker/v1/worker.grpc.pb.h"
#include "worker/engine.h"

namespace ditserve::worker {

class WorkerService final : public v1::Worker::Service {
 public:
  // `on_shutdown` is called (once) when the frontend asks the worker to exit.
  WorkerService(Engine* engine, std::function<void()> on_shutdown);

  grpc::Status GetRendezvous(grpc::ServerContext*, const v1::GetRendezvousRequest*,
                             v1::Rendezvous*) override;
  grpc::Status Init(grpc::ServerContext*, const v1::InitRequest*,
                    grpc::ServerWriter<v1::InitEvent>*) override;
  grpc::Status Run(grpc::ServerContext*, const v1::RunRequest*,
                   grpc::ServerWriter<v1::RunEvent>*) override;
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest*,
                      v1::CancelResponse*) override;
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::WorkerStatus*) override;
  grpc::Status Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                        v1::ShutdownResponse*) override;

 private:
  Engine* const engine_;
  std::function<void()> on_shutdown_;
};

}  // namespace ditserve::worker
