#include "server/frontend_options.h"

#include <filesystem>
#include <map>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/host_port.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "models/lora/lora_files.h"

namespace ditserve::server {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxLoraNameLength = 64;
constexpr uint64_t kMaxLorasPerRequestCeiling = 64;

bool IsValidLoraName(const std::string& name) {
  if (name.empty() || name.size() > kMaxLoraNameLength) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

std::string NameRule() {
  return absl::StrCat("1..", kMaxLoraNameLength, " characters of A-Z a-z 0-9 . _ -");
}

// Whether a folder holds an adapter as the workers find it (models/lora/lora_files.h); `why`
// says what is missing when not.
bool FolderHoldsAdapter(const fs::path& dir, std::string* why) {
  auto file = lora::AdapterFileInFolder(dir.string());
  if (!file.ok()) *why = std::string(file.status().message());
  return file.ok();
}

// --lora NAME=PATH.
absl::StatusOr<LoraAdapterOption> ParseLoraFlag(const std::string& value) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--lora must be NAME=PATH, got '", value, "'"));
  }
  LoraAdapterOption a{value.substr(0, eq), value.substr(eq + 1)};
  if (!IsValidLoraName(a.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora ", value, ": the name '", a.name, "' must be ", NameRule()));
  }
  if (a.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--lora ", value, ": the path is empty"));
  }
  std::error_code ec;
  const fs::path path = fs::absolute(a.path, ec);
  if (ec || !fs::exists(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora ", value, ": '", a.path, "' does not exist"));
  }
  if (fs::is_directory(path, ec)) {
    std::string why;
    if (!FolderHoldsAdapter(path, &why)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lora ", value, ": folder '", a.path, "' holds no adapter: ", why));
    }
  } else if (!fs::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora ", value, ": '", a.path, "' is neither a file nor a folder"));
  }
  a.path = path.string();
  return a;
}

// --lora-dir DIR: its *.safetensors files and adapter subfolders, by name.
absl::StatusOr<std::vector<LoraAdapterOption>> ScanLoraDir(const std::string& dir) {
  std::error_code ec;
  const fs::path root = fs::absolute(dir, ec);
  if (ec || !fs::is_directory(root, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--lora-dir '", dir, "' is not a folder"));
  }
  std::map<std::string, LoraAdapterOption> found;  // by entry name: a stable order
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    std::string name;
    std::string why;
    std::error_code entry_ec;  // a broken link is skipped, not an error
    if (it->is_directory(entry_ec)) {
      if (!FolderHoldsAdapter(p, &why)) continue;
      name = p.filename().string();
    } else if (it->is_regular_file(entry_ec) && p.extension() == ".safetensors") {
      name = p.stem().string();
    } else {
      continue;
    }
    if (!IsValidLoraName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora-dir: '", p.string(), "' would be the adapter '", name, "', but a name must be ",
          NameRule(), " (rename it, or name it with --lora NAME=PATH)"));
    }
    found[p.filename().string()] = LoraAdapterOption{name, p.string()};
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora-dir '", dir, "': cannot list it: ", ec.message()));
  }
  std::vector<LoraAdapterOption> out;
  for (auto& [entry, adapter] : found) out.push_back(std::move(adapter));
  return out;
}

// Every adapter of --lora and --lora-dir, names unique.
absl::StatusOr<std::vector<LoraAdapterOption>> ResolveLoraAdapters(const FrontendOptions& o) {
  std::vector<LoraAdapterOption> out;
  std::map<std::string, std::string> source;  // name -> where it came from, for the error
  auto add = [&](LoraAdapterOption a, std::string from) -> absl::Status {
    auto [it, inserted] = source.emplace(a.name, from);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoRA adapter name '", a.name, "' is given twice: by ", it->second, " and by ", from));
    }
    out.push_back(std::move(a));
    return absl::OkStatus();
  };
  for (const std::string& value : o.lora) {
    auto a = ParseLoraFlag(value);
    if (!a.ok()) return a.status();
    if (absl::Status s = add(*std::move(a), absl::StrCat("--lora ", value)); !s.ok()) return s;
  }
  if (!o.lora_dir.empty()) {
    auto scanned = ScanLoraDir(o.lora_dir);
    if (!scanned.ok()) return scanned.status();
    for (LoraAdapterOption& a : *scanned) {
      const std::string from = absl::StrCat("--lora-dir (", a.path, ")");
      if (absl::Status s = add(std::move(a), from); !s.ok()) return s;
    }
  }
  return out;
}

// One --quality-steps value: "12" (steps) or "0.5x" (a factor of the model's default).
absl::StatusOr<QualityPreset> ParseQualityPreset(const std::string& level, std::string value) {
  QualityPreset p;
  const std::string given = value;
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quality-steps: ", level, "=", given,
        ": the value must be a step count in 1..1000 or a factor of the model's default steps in "
        "0.01x..10x (e.g. 20 or 0.5x)"));
  };
  if (!value.empty() && (value.back() == 'x' || value.back() == 'X')) {
    value.pop_back();
    double f = 0;
    if (!absl::SimpleAtod(value, &f) || !(f >= 0.01 && f <= 10)) return bad();
    p.factor = f;
    return p;
  }
  uint32_t steps = 0;
  if (!absl::SimpleAtoi(value, &steps) || steps < 1 || steps > 1000) return bad();
  p.steps = steps;
  return p;
}

}  // namespace

absl::StatusOr<QualitySteps> ParseQualitySteps(const std::string& value) {
  QualitySteps out;
  std::map<std::string, bool> seen;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    const std::string entry(absl::StripAsciiWhitespace(item));
    const size_t eq = entry.find('=');
    const std::string level(
        absl::StripAsciiWhitespace(eq == std::string::npos ? entry : entry.substr(0, eq)));
    QualityPreset* preset = level == "low"      ? &out.low
                            : level == "medium" ? &out.medium
                            : level == "high"   ? &out.high
                                                : nullptr;
    if (eq == std::string::npos || preset == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--quality-steps must be LEVEL=VALUE,... with LEVEL low, medium or high, "
                       "got '",
                       entry, "'"));
    }
    if (seen[level]) {
      return absl::InvalidArgumentError(absl::StrCat("--quality-steps names ", level, " twice"));
    }
    seen[level] = true;
    ASSIGN_OR_RETURN(*preset,
                     ParseQualityPreset(level, std::string(absl::StripAsciiWhitespace(
                                                   absl::string_view(entry).substr(eq + 1)))));
  }
  return out;
}

uint64_t AutoMaxRequestBytes(const RequestLimits& limits) {
  return (uint64_t{64} << 20) + kMaxInputImagesAllowance * limits.max_input_image_bytes;
}

std::vector<std::string> FrontendOptions::WorkerAddresses() const {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(workers, ',', absl::SkipWhitespace())) {
    out.emplace_back(part);
  }
  return out;
}

uint32_t FrontendOptions::WorldSize() const {
  return workers.empty() ? static_cast<uint32_t>(spawn_workers)
                         : static_cast<uint32_t>(WorkerAddresses().size());
}

namespace {

// The OpenAI-style HTTP API (--http-listen) and what it keeps.
void BindHttpFlags(FlagParser& p, FrontendOptions& o) {
  p.AddString(
      "http-listen", &o.http_listen,
      "HOST:PORT of the OpenAI-style images HTTP API (POST /v1/images/generations; empty: off)");
  p.AddUint("http-max-edit-body-bytes", &o.http_max_edit_body_bytes,
            "largest POST /v1/images/edits body in bytes, images included (0: 64 MiB + the "
            "generations body limit)");
  p.AddString("quality-steps", &o.quality_steps,
              "denoising steps of OpenAI's quality levels: low=V,medium=V,high=V, each V a step "
              "count or a factor of the model's default steps (0.5x); hd = high, auto and standard "
              "= the model's default; a request's num_inference_steps wins");
  p.AddUint("http-image-store-bytes", &o.http_image_store_bytes,
            "response_format \"url\": keep result images in memory up to this many bytes, served "
            "at GET /v1/images/files/ID (0: off, url refused)");
  p.AddDouble("http-image-store-ttl", &o.http_image_store_ttl_seconds,
              "seconds a stored image stays fetchable (1..86400)");
  p.AddString("http-public-url", &o.http_public_url,
              "scheme://host[:port][/prefix] the image URLs start with (default: the listener's "
              "scheme and the request's Host header)");
}

// The worker group: which workers, the model's placement and how it runs.
void BindWorkerFlags(FlagParser& p, FrontendOptions& o) {
  p.AddUint("spawn-workers", &o.spawn_workers,
            "start and supervise N local worker processes (tp degree)");
  p.AddString("workers", &o.workers,
              "connect to workers started elsewhere: host:port,... in rank order");
  p.AddString("worker-binary", &o.worker_binary,
              "path of ditserve-worker (default: next to this binary)");
  p.AddString("worker-host", &o.worker_host, "address spawned workers listen on");
  p.AddString("device", &o.device, "cpu or cuda");
  p.AddString("dtype", &o.dtype, "float32 or bfloat16");
  p.AddString(
      "weights", &o.weights,
      "dtype | fp8: fp8 runs the transformer blocks' GEMMs with FP8 e4m3 weights (per-channel "
      "scales, quantized at load) and per-token activation scales; needs --device cuda, "
      "--dtype bfloat16 and an FP8 GPU (compute capability 8.9+)");
  p.AddUint("cuda-graphs", &o.cuda_graphs,
            "CUDA graphs of the transformer step each worker keeps, one per request shape in use "
            "(each holds one step's activations; 0: off, every step launched op by op); cuda only");
  p.AddString("warmup", &o.warmup,
              "auto | on | off: run one warm-up job after loading, before SERVING (auto: on cuda)");
  p.AddString("text-encoder-placement", &o.text_encoder_placement,
              "auto | sharded | rank0: where an LLM text encoder runs (auto: sharded above 4 GiB)");
  p.AddBool("replicate-modulation", &o.replicate_modulation,
            "keep the AdaLN modulation projections whole on every rank (the reference's plan)");
  p.AddUint("staging-buffer-mib", &o.staging_buffer_mib, "host staging buffer per loading rank");
}

// Admission, deadlines, supervision, request defaults and limits.
void BindRequestFlags(FlagParser& p, FrontendOptions& o) {
  p.AddUint("max-queue", &o.max_queue, "admission queue length (RESOURCE_EXHAUSTED beyond)");
  p.AddUint("max-batch", &o.max_batch, "largest batch of same-shape requests run together");
  p.AddDouble("default-timeout", &o.default_timeout_seconds,
              "seconds allowed to a request without a client deadline");
  p.AddDouble("drain-seconds", &o.drain_seconds, "grace period for in-flight work on SIGTERM");
  p.AddDouble("init-timeout", &o.init_timeout_seconds,
              "seconds allowed for the workers to form the group and load");
  p.AddUint("collective-timeout-ms", &o.collective_timeout_ms,
            "a collective that takes longer breaks the group");
  p.AddUint("heartbeat-interval-ms", &o.heartbeat_interval_ms,
            "how often each rank is asked whether it is alive");
  p.AddUint(
      "heartbeat-timeout-ms", &o.heartbeat_timeout_ms,
      "a rank that does not answer a heartbeat within this is hung: the group breaks (0: off)");
  p.AddUint("default-height", &o.default_height,
            "height for requests that give none (0: the model's default)");
  p.AddUint("default-width", &o.default_width,
            "width for requests that give none (0: the model's default)");
  p.AddUint("default-steps", &o.default_steps,
            "steps for requests that give none (0: the model's default)");
  p.AddDouble("default-cache-threshold", &o.default_cache_threshold,
              "step cache (First Block Cache) threshold for requests that leave cache_threshold "
              "absent, 0..1 (0: off; a request's own value, 0 included, wins)");
  p.AddUint("max-height", &o.limits.max_height, "largest height in pixels");
  p.AddUint("max-width", &o.limits.max_width, "largest width in pixels");
  p.AddUint("max-steps", &o.limits.max_steps, "most denoising steps");
  p.AddDouble("max-guidance", &o.limits.max_guidance, "largest guidance_scale");
  p.AddUint("max-sequence-length", &o.limits.max_sequence_length,
            "largest max_sequence_length (T5 tokens)");
  p.AddUint("max-prompt-bytes", &o.limits.max_prompt_bytes, "longest prompt in UTF-8 bytes");
  p.AddUint("max-input-image-bytes", &o.limits.max_input_image_bytes,
            "largest input image (GenerateRequest.images) in encoded bytes (1 KiB..128 MiB)");
  p.AddUint("max-input-image-pixels", &o.limits.max_input_image_pixels,
            "largest input image in width x height pixels, checked from its header before "
            "decoding (1..268435456)");
  p.AddUint("max-input-image-side", &o.limits.max_input_image_side,
            "largest input image width or height in pixels, checked from its header (1..65535)");
  p.AddUint("max-request-bytes", &o.max_request_bytes,
            "largest gRPC request in bytes (0: 64 MiB + 10 x --max-input-image-bytes; at most "
            "2 GiB - 1)");
}

// LoRA adapters and their limits.
void BindLoraFlags(FlagParser& p, FrontendOptions& o) {
  p.AddStringList("lora", &o.lora,
                  "NAME=PATH: a LoRA adapter requests may choose by NAME (a .safetensors file, "
                  "or a folder holding one)");
  p.AddString("lora-dir", &o.lora_dir,
              "folder of LoRA adapters: each *.safetensors file (named by its stem) and each "
              "subfolder holding one (named by the folder)");
  p.AddString("lora-mode", &o.lora_mode,
              "merge (adapted weights merged into a copy for each job: full speed, one copy of "
              "them in memory) | runtime (low-rank terms beside each GEMM: no extra memory, slower "
              "steps)");
  p.AddUint("lora-merge-max-mib", &o.lora_merge_max_mib,
            "merge mode: most MiB of merged weight copies one job may hold per rank (0: as much "
            "as fits); a job over it uses runtime terms");
  p.AddUint("max-loras-per-request", &o.limits.max_loras_per_request,
            "most LoRA adapters one request may choose (1..64)");
  p.AddDouble("max-lora-scale", &o.limits.max_lora_scale,
              "largest |scale| of a chosen LoRA adapter (above 0, at most 8)");
}

// TLS, the bearer token, logging.
void BindSecurityAndLogFlags(FlagParser& p, FrontendOptions& o) {
  p.AddString("tls-cert", &o.security.tls_cert_file,
              "PEM certificate chain: serve the public APIs over TLS (with --tls-key)");
  p.AddString("tls-key", &o.security.tls_key_file, "PEM private key of --tls-cert");
  p.AddBool("metrics-tls", &o.metrics_tls,
            "serve /metrics over HTTPS too, with --tls-cert/--tls-key");
  p.AddString(
      "api-token-file", &o.security.api_token_file,
      "file holding a bearer token every API call must send (health and /metrics stay open)");
  p.AddString("log-level", &o.log.level, "trace, debug, info, warn, error");
  p.AddString("log-format", &o.log.format, "text or json");
}

}  // namespace

void BindFrontendFlags(FlagParser& p, FrontendOptions& o) {
  p.AddString("model", &o.model_dir,
              "diffusers model folder (pipeline root with model_index.json)");
  p.AddString("listen", &o.listen, "HOST:PORT of the public gRPC API");
  p.AddString("metrics-listen", &o.metrics_listen,
              "HOST:PORT of the Prometheus /metrics endpoint (empty: off)");
  BindHttpFlags(p, o);
  BindWorkerFlags(p, o);
  BindRequestFlags(p, o);
  BindLoraFlags(p, o);
  BindSecurityAndLogFlags(p, o);
}

namespace {

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

// The model, the public listeners, the workers and how they load the model.
absl::Status ValidateModelOptions(const FrontendOptions& o) {
  if (o.model_dir.empty() && o.workers.empty()) return Bad("--model is required");
  if (o.listen.empty()) return Bad("--listen must be HOST:PORT");
  if (!o.http_listen.empty()) {
    if (auto address = ParseHostPort(o.http_listen, "--http-listen"); !address.ok()) {
      return address.status();
    }
  }
  if (o.http_max_edit_body_bytes != 0 && (o.http_max_edit_body_bytes < (uint64_t{1} << 20) ||
                                          o.http_max_edit_body_bytes > (uint64_t{1} << 30))) {
    return Bad(absl::StrCat(
        "--http-max-edit-body-bytes must be 0 (64 MiB + the generations body limit) or in ",
        uint64_t{1} << 20, "..", uint64_t{1} << 30, ", got ", o.http_max_edit_body_bytes));
  }
  if (auto presets = ParseQualitySteps(o.quality_steps); !presets.ok()) {
    return presets.status();
  }
  if (o.http_image_store_bytes != 0 && o.http_image_store_bytes > (uint64_t{64} << 30)) {
    return Bad(absl::StrCat("--http-image-store-bytes must be 0 (off) or at most ",
                            uint64_t{64} << 30, ", got ", o.http_image_store_bytes));
  }
  if (!(o.http_image_store_ttl_seconds >= 1 && o.http_image_store_ttl_seconds <= 86400)) {
    return Bad(absl::StrCat("--http-image-store-ttl must be in 1..86400 seconds, got ",
                            o.http_image_store_ttl_seconds));
  }
  if (!o.http_public_url.empty()) {
    const std::string& u = o.http_public_url;
    const bool scheme = absl::StartsWith(u, "http://") || absl::StartsWith(u, "https://");
    const size_t host_at = u.find("://") + 3;
    bool clean = scheme && host_at < u.size() && u[host_at] != '/';
    for (char c : u) {
      clean = clean && c > ' ' && c < 0x7f && c != '"' && c != '\\' && c != '?' && c != '#';
    }
    if (!clean) {
      return Bad(
          absl::StrCat("--http-public-url must be http(s)://HOST[:PORT][/PREFIX] without a "
                       "query or fragment, got '",
                       u, "'"));
    }
  }
  if (o.workers.empty() && (o.spawn_workers < 1 || o.spawn_workers > 64)) {
    return Bad(absl::StrCat("--spawn-workers must be in 1..64, got ", o.spawn_workers));
  }
  absl::StatusOr<DeviceKind> device = ParseDeviceKind(o.device, "--device");
  if (!device.ok()) return device.status();
  if (o.warmup != "auto" && o.warmup != "on" && o.warmup != "off") {
    return Bad(absl::StrCat("--warmup must be auto, on or off, got '", o.warmup, "'"));
  }
  if (auto placement =
          ParseTextEncoderPlacement(o.text_encoder_placement, "--text-encoder-placement");
      !placement.ok()) {
    return placement.status();
  }
  absl::StatusOr<ModelDtype> dtype = ParseModelDtype(o.dtype, "--dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<WeightFormat> weights = ParseWeightFormat(o.weights);
  if (!weights.ok()) return weights.status();
  if (*weights == WeightFormat::kFp8 &&
      (*device != DeviceKind::kCuda || *dtype != ModelDtype::kBFloat16)) {
    return Bad(absl::StrCat("--weights fp8 needs --device cuda and --dtype bfloat16 (got --device ",
                            o.device, " --dtype ", o.dtype, ")"));
  }
  if (o.cuda_graphs > kMaxCudaGraphs) {
    return Bad(
        absl::StrCat("--cuda-graphs must be in 0..", kMaxCudaGraphs, ", got ", o.cuda_graphs));
  }
  return absl::OkStatus();
}

// TLS and the API token, worker supervision, the queue and the drain.
absl::Status ValidateServingOptions(const FrontendOptions& o) {
  if (absl::Status s = ValidateSecurityOptions(o.security); !s.ok()) return s;
  if (o.metrics_tls && o.security.tls_cert_file.empty()) {
    return Bad("--metrics-tls needs --tls-cert and --tls-key");
  }
  if (o.heartbeat_interval_ms < 100 || o.heartbeat_interval_ms > 3600000) {
    return Bad("--heartbeat-interval-ms must be in 100..3600000");
  }
  if (o.heartbeat_timeout_ms != 0 &&
      (o.heartbeat_timeout_ms < 100 || o.heartbeat_timeout_ms > 3600000)) {
    return Bad("--heartbeat-timeout-ms must be 0 (off) or in 100..3600000");
  }
  if (o.max_queue < 1) return Bad("--max-queue must be at least 1");
  if (o.max_batch < 1 || o.max_batch > 64) return Bad("--max-batch must be in 1..64");
  if (o.default_timeout_seconds <= 0) return Bad("--default-timeout must be positive");
  if (o.drain_seconds < 0) return Bad("--drain-seconds must not be negative");
  return absl::OkStatus();
}

// The input image limits and the gRPC request size they imply.
absl::Status ValidateInputImageLimits(const FrontendOptions& o) {
  const RequestLimits& l = o.limits;
  if (l.max_input_image_bytes < 1024 || l.max_input_image_bytes > kMaxInputImageBytesCeiling) {
    return Bad(absl::StrCat("--max-input-image-bytes must be in 1024..", kMaxInputImageBytesCeiling,
                            ", got ", l.max_input_image_bytes));
  }
  if (l.max_input_image_pixels < 1 || l.max_input_image_pixels > (uint64_t{1} << 28)) {
    return Bad(absl::StrCat("--max-input-image-pixels must be in 1..", uint64_t{1} << 28, ", got ",
                            l.max_input_image_pixels));
  }
  if (l.max_input_image_side < 1 || l.max_input_image_side > 65535) {
    return Bad(
        absl::StrCat("--max-input-image-side must be in 1..65535, got ", l.max_input_image_side));
  }
  constexpr uint64_t kGrpcMax = (uint64_t{1} << 31) - 1;  // gRPC's sizes are ints
  if (o.max_request_bytes != 0 &&
      (o.max_request_bytes < (uint64_t{1} << 20) || o.max_request_bytes > kGrpcMax)) {
    return Bad(absl::StrCat("--max-request-bytes must be 0 (automatic) or in ", uint64_t{1} << 20,
                            "..", kGrpcMax, ", got ", o.max_request_bytes));
  }
  return absl::OkStatus();
}

// The request limits and the defaults they bound (the LoRA limits are ValidateLoraOptions').
absl::Status ValidateRequestLimits(const FrontendOptions& o) {
  const RequestLimits& l = o.limits;
  if (l.max_height < l.size_multiple || l.max_height % l.size_multiple != 0) {
    return Bad(absl::StrCat("--max-height must be a positive multiple of ", l.size_multiple));
  }
  if (l.max_width < l.size_multiple || l.max_width % l.size_multiple != 0) {
    return Bad(absl::StrCat("--max-width must be a positive multiple of ", l.size_multiple));
  }
  if (o.default_height != 0 &&
      (o.default_height % l.size_multiple != 0 || o.default_height > l.max_height)) {
    return Bad(absl::StrCat("--default-height must be a multiple of ", l.size_multiple, " up to ",
                            l.max_height));
  }
  if (o.default_width != 0 &&
      (o.default_width % l.size_multiple != 0 || o.default_width > l.max_width)) {
    return Bad(absl::StrCat("--default-width must be a multiple of ", l.size_multiple, " up to ",
                            l.max_width));
  }
  if (o.default_steps > l.max_steps) return Bad("--default-steps must not exceed --max-steps");
  if (!(o.default_cache_threshold >= 0 && o.default_cache_threshold <= kMaxCacheThreshold)) {
    return Bad(absl::StrCat("--default-cache-threshold must be in 0..", kMaxCacheThreshold,
                            " (0: the step cache off), got ", o.default_cache_threshold));
  }
  if (l.max_steps < l.min_steps || l.max_steps > 1000) return Bad("--max-steps must be in 1..1000");
  if (l.max_guidance < l.min_guidance) return Bad("--max-guidance must not be negative");
  if (l.max_sequence_length < 1 || l.max_sequence_length > 512) {
    return Bad("--max-sequence-length must be in 1..512");
  }
  return ValidateInputImageLimits(o);
}

// The LoRA limits and mode, then the adapters (--lora, --lora-dir) into o.lora_adapters.
absl::Status ValidateLoraOptions(FrontendOptions& o) {
  const RequestLimits& l = o.limits;
  if (l.max_loras_per_request < 1 || l.max_loras_per_request > kMaxLorasPerRequestCeiling) {
    return Bad(absl::StrCat("--max-loras-per-request must be in 1..", kMaxLorasPerRequestCeiling,
                            ", got ", l.max_loras_per_request));
  }
  if (!(l.max_lora_scale > 0) || l.max_lora_scale > kLoraScaleCeiling) {
    return Bad(absl::StrCat("--max-lora-scale must be above 0 and at most ", kLoraScaleCeiling,
                            " (the workers' bound), got ", l.max_lora_scale));
  }
  if (auto mode = ParseLoraMode(o.lora_mode, "--lora-mode"); !mode.ok()) return mode.status();
  auto adapters = ResolveLoraAdapters(o);
  if (!adapters.ok()) return adapters.status();
  o.lora_adapters = *std::move(adapters);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateFrontendOptions(FrontendOptions& o) {
  RETURN_IF_ERROR(ValidateModelOptions(o));
  ASSIGN_OR_RETURN(o.quality_presets, ParseQualitySteps(o.quality_steps));
  RETURN_IF_ERROR(ValidateServingOptions(o));
  RETURN_IF_ERROR(ValidateRequestLimits(o));
  return ValidateLoraOptions(o);
}

}  // namespace ditserve::server
