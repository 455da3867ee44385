// FrontendOptions: every setting of ditserve-frontend, bound to flags in one place (Bind) and
// validated in one place (Validate). Defaults here are the documented defaults (README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "common/logging.h"
#include "models/lora/lora_choice.h"
#include "server/api_security.h"

namespace ditserve::server {

// The largest --max-lora-scale: the workers refuse a LoRA scale beyond it.
inline constexpr double kLoraScaleCeiling = lora::kMaxLoraScale;
// GenerateRequest.preview_images' bound (Limits.max_preview_images): OpenAI's partial_images range
// (0..3), and the workers' (pipeline::GenerationJob::kMaxPreviewImages).
inline constexpr uint32_t kMaxPreviewImages = 3;
// --default-cache-threshold's bound, and the most GenerateRequest.cache_threshold may be on any
// model (the workers' pipeline::GenerationJob::kMaxCacheThreshold; a model may offer less:
// ModelInfo.step_cache.max_threshold).
inline constexpr double kMaxCacheThreshold = 1.0;

struct RequestLimits {
  uint64_t max_height = 2048;
  uint64_t max_width = 2048;
  uint64_t size_multiple = 16;
  uint64_t min_steps = 1;
  uint64_t max_steps = 200;
  double min_guidance = 0.0;
  double max_guidance = 30.0;
  double max_true_cfg = 30.0;
  uint64_t max_sequence_length = 512;
  uint64_t max_prompt_bytes = 8192;
  uint64_t max_request_id_bytes = 128;
  uint64_t max_loras_per_request = 4;  // 1..64
  double max_lora_scale = 4.0;         // |scale| of each chosen adapter; (0, kLoraScaleCeiling]
  // Each input image (GenerateRequest.images): its encoded bytes, and its size as the header
  // states it, checked before any decoder runs (server/input_images.h).
  uint64_t max_input_image_bytes = uint64_t{32} << 20;  // 1 KiB..kMaxInputImageBytesCeiling
  uint64_t max_input_image_pixels = uint64_t{1} << 24;  // width x height; 1..2^28
  uint64_t max_input_image_side = 8192;                 // width and height; 1..65535
};

// The most input images any served family takes (FLUX.2: 10): the gRPC message allowance below.
inline constexpr uint64_t kMaxInputImagesAllowance = 10;
// --max-input-image-bytes' ceiling, so that the automatic --max-request-bytes stays below 2 GiB.
inline constexpr uint64_t kMaxInputImageBytesCeiling = uint64_t{128} << 20;
// The public gRPC API's largest request with --max-request-bytes 0: 64 MiB (precomputed
// embeddings) plus kMaxInputImagesAllowance images of --max-input-image-bytes (384 MiB by default).
uint64_t AutoMaxRequestBytes(const RequestLimits& limits);

// The denoising steps of one of OpenAI's `quality` levels (--quality-steps).
struct QualityPreset {
  uint32_t steps = 0;   // > 0: this many steps
  double factor = 1.0;  // steps 0: round(factor x the model's default steps), at least 1
  bool operator==(const QualityPreset& o) const { return steps == o.steps && factor == o.factor; }
};
// OpenAI's `quality` levels as steps ("hd" is "high"; "auto" and "standard" the model's default).
struct QualitySteps {
  QualityPreset low{0, 0.5};
  QualityPreset medium{0, 1.0};
  QualityPreset high{0, 1.5};
};
// --quality-steps: comma-separated LEVEL=VALUE (LEVEL low, medium or high; VALUE a step count
// 1..1000 or a factor of the model's default steps written with an x, 0.01x..10x); levels not named
// keep their defaults (low=0.5x, medium=1x, high=1.5x). INVALID_ARGUMENT naming the flag.
absl::StatusOr<QualitySteps> ParseQualitySteps(const std::string& value);

// A LoRA adapter every worker loads at start (worker::v1::InitRequest.loras).
struct LoraAdapterOption {
  std::string name;  // [A-Za-z0-9._-]{1,64}, unique
  std::string path;  // absolute: a .safetensors file, or a folder holding one
  bool operator==(const LoraAdapterOption& o) const { return name == o.name && path == o.path; }
};

struct FrontendOptions {
  std::string model_dir;
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";  // empty = no metrics endpoint
  // The OpenAI-style images HTTP API (server/http_api.h); empty = off.
  std::string http_listen;
  // The largest POST /v1/images/edits body (its images and fields); 0: 64 MiB + the generations
  // body limit (HttpApiOptions). Else 1 MiB..1 GiB.
  uint64_t http_max_edit_body_bytes = 0;
  // OpenAI's `quality` levels as steps (ParseQualitySteps); parsed into quality_presets by
  // ValidateFrontendOptions.
  std::string quality_steps = "low=0.5x,medium=1x,high=1.5x";
  QualitySteps quality_presets;
  // response_format "url": the images kept in memory (server/image_store.h), at most this many
  // bytes (0: off, "url" is refused), each for http_image_store_ttl_seconds (1..86400).
  uint64_t http_image_store_bytes = 0;
  double http_image_store_ttl_seconds = 3600;
  // The scheme, host and optional path prefix the image URLs start with (e.g.
  // https://images.example.com); empty: the listener's scheme and the request's Host header.
  std::string http_public_url;
  uint64_t spawn_workers = 1;
  std::string workers;  // comma-separated host:port list; overrides spawn_workers
  std::string worker_binary;  // default: ditserve-worker next to this binary
  std::string worker_host = "127.0.0.1";  // where spawned workers listen
  std::string device = "cpu";
  std::string dtype = "float32";
  // "dtype": weights in --dtype; "fp8": the transformer blocks' token GEMMs in FP8 e4m3 with
  // per-channel scales, quantized by each worker from its slice (cuda + bfloat16 only).
  std::string weights = "dtype";
  // CUDA graphs of the denoising step each worker keeps (one per request shape in use; 0: off).
  uint64_t cuda_graphs = 4;
  // Where an LLM text encoder (FLUX.2's Mistral3, Qwen-Image's Qwen2.5-VL) runs: "sharded" over the
  // ranks, "rank0" (a replica on rank 0 that broadcasts), or "auto" (sharded when its weights exceed
  // 4 GiB in the serving dtype and the degree keeps whole key/value head groups).
  std::string text_encoder_placement = "auto";
  // Keep the AdaLN modulation projections replicated on every rank, as the reference's plans do
  // (default: sharded rowwise_split_input, 1/N per rank, one small all-reduce a step for all).
  bool replicate_modulation = false;
  // One warm-up job per group formation, before health reports SERVING, at --default-height/width
  // (else the model's default size): "auto" (on with --device cuda), "on", "off".
  std::string warmup = "auto";
  bool WarmupEnabled() const { return warmup == "on" || (warmup == "auto" && device == "cuda"); }
  uint64_t staging_buffer_mib = 64;
  uint64_t max_queue = 16;
  uint64_t max_batch = 1;
  double default_timeout_seconds = 600;  // when the client sends no deadline
  double drain_seconds = 30;
  double init_timeout_seconds = 1800;
  uint64_t collective_timeout_ms = 300000;
  // Every heartbeat_interval_ms the frontend asks each rank for its status; a rank that has not
  // answered within heartbeat_timeout_ms is hung: the group breaks (0: no heartbeat).
  uint64_t heartbeat_interval_ms = 5000;
  uint64_t heartbeat_timeout_ms = 15000;
  // Server-side defaults for requests that leave a field at 0 (0 here: the model's own default).
  uint64_t default_height = 0;
  uint64_t default_width = 0;
  uint64_t default_steps = 0;
  // GenerateRequest.cache_threshold when a request leaves it absent (0..kMaxCacheThreshold; 0: the
  // step cache off; above the model's step_cache.max_threshold: that bound).
  double default_cache_threshold = 0;
  RequestLimits limits;
  // The largest GenerateRequest the gRPC server receives, in bytes (0: AutoMaxRequestBytes).
  uint64_t max_request_bytes = 0;
  uint64_t MaxRequestBytes() const {
    return max_request_bytes ? max_request_bytes : AutoMaxRequestBytes(limits);
  }
  // LoRA adapters, as given: --lora NAME=PATH (repeatable) and --lora-dir DIR.
  std::vector<std::string> lora;
  std::string lora_dir;
  // How the workers apply a request's adapters: "merge" (a merged copy of the adapted weights for
  // the job) or "runtime" (low-rank terms beside each GEMM, no extra weight memory).
  std::string lora_mode = "merge";
  // Merge mode: the most MiB of merged copies one job may hold per rank (0: as much as fits);
  // a job over it runs with runtime terms.
  uint64_t lora_merge_max_mib = 0;
  // Filled by ValidateFrontendOptions from `lora` (in the order given) then `lora_dir` (by name).
  std::vector<LoraAdapterOption> lora_adapters;
  SecurityOptions security;
  bool metrics_tls = false;  // serve /metrics over HTTPS with security's certificate and key  // TLS and bearer token of the public APIs (server/api_security.h)
  LogOptions log;

  // Parsed from `workers`.
  std::vector<std::string> WorkerAddresses() const;
  uint32_t WorldSize() const;
};

void BindFrontendFlags(FlagParser& parser, FrontendOptions& options);
// Checks every option (INVALID_ARGUMENT naming the flag) and fills the derived `lora_adapters`:
// each --lora path must exist (a file, or a folder as --lora-dir's subfolders below), relative
// paths are made absolute against the current directory; --lora-dir DIR adds every *.safetensors
// file directly in DIR (named by its stem) and every subfolder holding
// pytorch_lora_weights.safetensors, adapter_model.safetensors or exactly one .safetensors file
// (named by the folder); other entries are ignored. Names must be unique across both flags. Reads
// the file system; call once, from main() (or a test) before MakeWorkerGroupOptions.
absl::Status ValidateFrontendOptions(FrontendOptions& options);

}  // namespace ditserve::server
