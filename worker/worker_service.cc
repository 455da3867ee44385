#include "worker/worker_service.h"

#include <spdlog/spdlog.h>

#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "worker/job_codec.h"

namespace ditserve::worker {

WorkerService::WorkerService(Engine* engine, std::function<void()> on_shutdown)
    : engine_(engine), on_shutdown_(std::move(on_shutdown)) {}

grpc::Status WorkerService::GetRendezvous(grpc::ServerContext*,
                                          const v1::GetRendezvousRequest* req,
                                          v1::Rendezvous* resp) {
  auto r = engine_->MakeRendezvous(req->world_size());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Init(grpc::ServerContext*, const v1::InitRequest* req,
                                 grpc::ServerWriter<v1::InitEvent>* writer) {
  absl::Status s = engine_->Init(*req, [&](const v1::InitEvent& ev) { writer->Write(ev); });
  if (!s.ok()) spdlog::error("Init failed: {}", s.ToString());
  return ToGrpcStatus(s);
}

grpc::Status WorkerService::Run(grpc::ServerContext* ctx, const v1::RunRequest* req,
                                grpc::ServerWriter<v1::RunEvent>* writer) {
  auto result = [&]() -> absl::StatusOr<v1::RunResult> {
    RunJob job;
    job.job_id = req->job_id();
    ASSIGN_OR_RETURN(job.job, JobFromRunRequest(*req));
    ASSIGN_OR_RETURN(pipeline::GenerationResult generated,
                     engine_->Run(
                         job,
                         [&](const pipeline::StepEvent& e) {
                           v1::RunEvent ev;
                           ev.mutable_progress()->set_step(e.step);
                           ev.mutable_progress()->set_total_steps(e.total);
                           ev.mutable_progress()->set_step_seconds(e.seconds);
                           writer->Write(ev);
                         },
                         [ctx] { return ctx->IsCancelled(); }));
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
  *resp = engine_->Status();
  return grpc::Status::OK;
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext*, const v1::ShutdownRequest*,
                                     v1::ShutdownResponse*) {
  if (on_shutdown_) on_shutdown_();
  return grpc::Status::OK;
}

}  // namespace ditserve::worker
