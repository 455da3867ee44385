#include "pipeline/job_steps.h"

#include "absl/strings/str_cat.h"
#include "comm/agree.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/vae/image_postprocess.h"
#include "pipeline/latents.h"

namespace ditserve::pipeline {

absl::Status AgreeOnFailure(comm::Communicator& comm, const absl::Status& local, const char* what,
                            torch::Device device) {
  const int32_t local_code = local.ok() ? 0 : static_cast<int32_t>(local.code());
  ASSIGN_OR_RETURN(int32_t code, comm::AgreeOnMax(comm, local_code, device));
  if (code == 0) return absl::OkStatus();
  if (!local.ok()) return local;
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat(what, " failed on another rank"));
}

absl::Status BroadcastFromRank0(
    comm::Communicator& comm, const char* what,
    const std::function<absl::Status(std::vector<torch::Tensor>*)>& produce,
    const std::vector<std::vector<int64_t>>& shapes, torch::ScalarType dtype, torch::Device device,
    std::vector<torch::Tensor>* tensors) {
  absl::Status local;
  if (comm.rank() == 0) {
    tensors->clear();
    // Guarded here: an exception on rank 0 alone must still reach the agreement below.
    local = GuardTorchStatus(what, [&] { return produce(tensors); });
    if (local.ok() && tensors->size() != shapes.size()) {
      local = absl::InternalError("rank 0 produced the wrong number of tensors");
    }
  }
  RETURN_IF_ERROR(AgreeOnFailure(comm, local, what, device));
  if (comm.world_size() == 1) return absl::OkStatus();
  if (comm.rank() != 0) {
    RETURN_IF_ERROR(GuardTorchStatus("broadcast buffers", [&] {
      tensors->clear();
      for (const auto& shape : shapes) {
        tensors->push_back(torch::empty(shape, torch::TensorOptions().dtype(dtype).device(device)));
      }
    }));
  }
  for (torch::Tensor& t : *tensors) RETURN_IF_ERROR(comm.Broadcast(t, 0));
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> BatchNoise(const GenerationJob& job,
                                         const std::vector<int64_t>& item_shape,
                                         torch::ScalarType dtype, torch::Device device,
                                         std::vector<std::vector<int64_t>> drawn_before) {
  std::vector<std::vector<int64_t>> draws = std::move(drawn_before);
  draws.push_back(item_shape);  // the noise is each generator's last draw
  std::vector<torch::Tensor> noise;
  for (const JobItem& item : job.items) {
    ASSIGN_OR_RETURN(std::vector<torch::Tensor> drawn, SeededDraws(draws, item.seed, dtype));
    noise.push_back(std::move(drawn.back()));
  }
  return GuardTorch("initial noise", [&] { return torch::cat(noise, 0).to(device); });
}

absl::StatusOr<torch::Tensor> StackEmbeddings(
    const GenerationJob& job, bool negative,
    const std::function<torch::Tensor(const PromptEmbeddings&)>& pick, const char* field) {
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < job.items.size(); ++i) {
    const auto& e = negative ? job.items[i].negative_embeddings : job.items[i].embeddings;
    if (!e.has_value() || !pick(*e).defined()) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, ": ", field, " is missing"));
    }
    parts.push_back(pick(*e));
    if (!parts.back().sizes().slice(1).equals(parts.front().sizes().slice(1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("item ", i, ": ", field, " has a different shape than item 0's"));
    }
  }
  return GuardTorch(field, [&] { return torch::cat(parts, 0); });
}

torch::Tensor GuidanceScales(const GenerationJob& job, torch::Device device) {
  std::vector<float> values;
  for (const JobItem& item : job.items) values.push_back(item.guidance_scale);
  return torch::tensor(values, torch::kFloat32).to(device);
}

torch::Tensor TrueCfgScales(const GenerationJob& job, torch::ScalarType dtype,
                            torch::Device device) {
  std::vector<float> values;
  for (const JobItem& item : job.items) values.push_back(item.true_cfg_scale);
  return torch::tensor(values, torch::kFloat32)
      .to(device, dtype)
      .view({static_cast<int64_t>(values.size()), 1, 1});
}

absl::StatusOr<std::vector<torch::Tensor>> DecodeImages(
    const torch::Tensor& latents,
    const std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor&)>& decode) {
  return GuardTorch("decoding images", [&]() -> absl::StatusOr<std::vector<torch::Tensor>> {
    ASSIGN_OR_RETURN(torch::Tensor decoded, decode(latents));
    ASSIGN_OR_RETURN(torch::Tensor images, vae::PostprocessImage(decoded));
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < images.size(0); ++i) {
      out.push_back(images[i].to(torch::kCPU, torch::kFloat32));
    }
    return out;
  });
}

absl::Status CollectOutputs(
    const GenerationJob& job, const torch::Tensor& latents,
    const std::function<absl::StatusOr<torch::Tensor>(const torch::Tensor&)>& decode,
    GenerationResult* result) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t batch = static_cast<int64_t>(job.items.size());
  if (job.output == JobOutput::kLatents) {
    for (int64_t i = 0; i < batch; ++i) {
      result->latents.push_back(latents.slice(0, i, i + 1).to(torch::kCPU, torch::kFloat32));
    }
  } else {
    ASSIGN_OR_RETURN(result->images, DecodeImages(latents, decode));
  }
  result->seconds.decode = SecondsSince(start);
  return absl::OkStatus();
}

}  // namespace ditserve::pipeline
