#include "worker/worker_service.h"

#include <spdlog/spdlog.h>

#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "worker/job_codec.h"
#include "worker/progress_queue.h"

namespace ditserve::worker {
namespace {

// Progress events a call keeps for a client that reads slower than the job runs; beyond them the
// oldest waiting ones are dropped (progress_queue.h). A step event is ~20 bytes.
constexpr size_t kRunProgressEvents = 64;
constexpr size_t kInitProgressEvents = 64;

}  // namespace

WorkerService::WorkerService(Engine* engine, std::function<void()> on_shutdown)
    : engine_(engine), on_shutdown_(std::move(on_shutdown)) {}

grpc::Status WorkerService::GetRendezvous(grpc::ServerContext*,
                                          const v1::GetRendezvousRequest* req,
                                          v1::Rendezvous* resp) {
  auto r = engine_->MakeRendezvous(req->world_size());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = RendezvousToProto(*r);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Init(grpc::ServerContext*, const v1::InitRequest* req,
                                 grpc::ServerWriter<v1::InitEvent>* writer) {
  auto report = [&]() -> absl::StatusOr<InitReport> {
    ASSIGN_OR_RETURN(InitConfig config, InitConfigFromRequest(*req));
    ProgressQueue<InitProgress> progress(kInitProgressEvents);
    auto done = engine_->Init(std::move(config), &progress);
    // This thread writes; the engine thread only pushes (a slow client never stalls the device).
    progress.Drain([&](const InitProgress& p) { return writer->Write(InitEventFromProgress(p)); });
    return done.get();
  }();
  if (!report.ok()) {
    spdlog::error("Init failed: {}", report.status().ToString());
    return ToGrpcStatus(report.status());
  }
  writer->Write(ReadyEvent(*report));
  return grpc::Status::OK;
}

grpc::Status WorkerService::Run(grpc::ServerContext* ctx, const v1::RunRequest* req,
                                grpc::ServerWriter<v1::RunEvent>* writer) {
  auto result = [&]() -> absl::StatusOr<v1::RunResult> {
    RunJob job;
    job.job_id = req->job_id();
    ASSIGN_OR_RETURN(job.job, JobFromRunRequest(*req));
    ProgressQueue<pipeline::StepEvent> progress(kRunProgressEvents);
    auto done = engine_->Run(std::move(job), &progress, [ctx] { return ctx->IsCancelled(); });
    // This thread writes; the engine thread only pushes (a slow client never stalls the device).
    progress.Drain(
        [&](const pipeline::StepEvent& e) { return writer->Write(RunEventFromStep(e)); });
    ASSIGN_OR_RETURN(pipeline::GenerationResult generated, done.get());
    std::optional<pipeline::ModelCard> card = engine_->Card();
    if (!card) return absl::InternalError("the model card is gone");
    return RunResultFromGeneration(*req, generated, *card);
  }();
  if (!result.ok()) {
    if (result.status().code() != absl::StatusCode::kCancelled) {
      spdlog::error("job {} failed: {}", req->job_id(), result.status().ToString());
    }
    return ToGrpcStatus(result.status());
  }
  v1::RunEvent last;
  *last.mutable_result() = std::move(*result);
  writer->Write(last);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Cancel(grpc::ServerContext*, const v1::CancelRequest* req,
                                   v1::CancelResponse*) {
  engine_->Cancel(req->job_id());
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                                      v1::WorkerStatus* resp) {
  *resp = WorkerStatusToProto(engine_->Status());
  return grpc::Status::OK;
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                                     v1::ShutdownResponse*) {
  if (on_shutdown_) on_shutdown_();
  return grpc::Status::OK;
}

}  // namespace ditserve::worker
