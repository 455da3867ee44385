#include "cli/output.h"

#include <sys/stat.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "cli/generate_request.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "sharding/safetensors_writer.h"

namespace ditserve::cli {
namespace {

using ditserve::v1::GenerateResponse;
using ditserve::v1::OutputFormat;

std::map<std::string, std::string> Metadata(const GenerateResponse& r) {
  return {{"request_id", r.request_id()},
          {"seed", std::to_string(r.seed())},
          {"num_inference_steps", std::to_string(r.num_inference_steps())},
          {"height", std::to_string(r.height())},
          {"width", std::to_string(r.width())}};
}

absl::StatusOr<std::string> EncodeRaw(const GenerateResponse& r) {
  uint64_t expected = uint64_t{r.height()} * r.width() * 3 * sizeof(float);
  if (r.height() == 0 || r.width() == 0 || r.image().size() != expected) {
    return absl::DataLossError(absl::StrCat("raw image has ", r.image().size(), " bytes, ",
                                            r.height(), "x", r.width(), "x3 float32 needs ",
                                            expected));
  }
  return sharding::SerializeSafetensors(
      {{"image", sharding::DType::kF32, {int64_t{r.height()}, int64_t{r.width()}, 3},
        r.image().data()}},
      Metadata(r));
}

absl::StatusOr<std::string> EncodeLatents(const GenerateResponse& r) {
  const ditserve::v1::Tensor& t = r.latents();
  sharding::DType dtype;
  switch (t.dtype()) {
    case ditserve::v1::DTYPE_FLOAT32: dtype = sharding::DType::kF32; break;
    case ditserve::v1::DTYPE_BFLOAT16: dtype = sharding::DType::kBF16; break;
    case ditserve::v1::DTYPE_FLOAT16: dtype = sharding::DType::kF16; break;
    default:
      return absl::DataLossError("latents tensor has no dtype");
  }
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  if (shape.empty()) return absl::DataLossError("latents tensor has no shape");
  uint64_t expected = sharding::DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return absl::DataLossError("latents tensor has a negative dimension");
    expected *= static_cast<uint64_t>(d);
  }
  if (t.data().size() != expected) {
    return absl::DataLossError(absl::StrCat("latents tensor has ", t.data().size(),
                                            " bytes, its shape needs ", expected));
  }
  return sharding::SerializeSafetensors({{"latents", dtype, shape, t.data().data()}}, Metadata(r));
}

}  // namespace

absl::StatusOr<std::string> EncodeOutput(const GenerateResponse& response,
                                         OutputFormat requested) {
  std::string got = OutputFormatName(response.format());
  std::string want = OutputFormatName(requested);
  if (got != want) {
    return absl::FailedPreconditionError(
        absl::StrCat("asked for format ", want, ", the server answered ", got));
  }
  switch (requested) {
    case ditserve::v1::OUTPUT_FORMAT_RAW_F32: return EncodeRaw(response);
    case ditserve::v1::OUTPUT_FORMAT_LATENTS: return EncodeLatents(response);
    default:
      if (response.image().empty()) return absl::DataLossError("the server sent an empty image");
      return response.image();
  }
}

namespace {

// Opens `path` for writing (creating or truncating it) and writes all of `bytes`; write errors
// name `target`, the file the user asked for. Never removes anything.
absl::Status WriteBytes(const std::string& path, const std::string& target, absl::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return absl::DataLossError(absl::StrCat("cannot write ", target, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteOutputFile(const std::string& path, absl::string_view bytes) {
  if (path == "-") {
    if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() ||
        std::fflush(stdout) != 0) {
      return absl::UnavailableError(absl::StrCat("writing to stdout: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  // An existing path that is not a plain file (/dev/null, a FIFO, a symlink such as /dev/stdout)
  // is written in place: replacing it by rename would put a regular file where the device was.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return WriteBytes(path, path, bytes);
  // A plain file is replaced atomically: readers never see half an image.
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  absl::Status written = WriteBytes(tmp, path, bytes);
  if (written.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    written = absl::DataLossError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  if (!written.ok()) {
    std::remove(tmp.c_str());
    return written;
  }
  return absl::OkStatus();
}

std::string ResultSummaryJson(const GenerateResponse& r, const std::string& output,
                              size_t bytes) {
  const ditserve::v1::Timings& t = r.timings();
  nlohmann::ordered_json j = {
      {"output", output},
      {"format", OutputFormatName(r.format())},
      {"bytes", bytes},
      {"request_id", r.request_id()},
      {"seed", std::to_string(r.seed())},
      {"num_inference_steps", r.num_inference_steps()},
      {"height", r.height()},
      {"width", r.width()},
      {"timings",
       {{"queue_seconds", t.queue_seconds()},
        {"encode_seconds", t.encode_seconds()},
        {"denoise_seconds", t.denoise_seconds()},
        {"decode_seconds", t.decode_seconds()},
        {"total_seconds", t.total_seconds()},
        {"full_steps", t.full_steps()},
        {"cached_steps", t.cached_steps()}}}};
  return j.dump();
}

}  // namespace ditserve::cli
