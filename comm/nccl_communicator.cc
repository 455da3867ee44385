#include "comm/nccl_communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

// Non-blocking communicators (and with them bounded init and calls) came with NCCL 2.14.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define DITSERVE_NCCL_NONBLOCKING 1
#else
#define DITSERVE_NCCL_NONBLOCKING 0
#endif

namespace ditserve::comm {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// Usage errors are the caller's; everything else means the group is broken.
absl::Status NcclStatus(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  std::string text = absl::StrCat(what, ": NCCL error ", static_cast<int>(r), " (",
                                  ncclGetErrorString(r), ")");
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') absl::StrAppend(&text, ": ", last);
  }
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
    return absl::InvalidArgumentError(text);
  }
  return absl::UnavailableError(text);
}

ncclDataType_t ToNccl(NcclDataType t) {
  switch (t) {
    case NcclDataType::kFloat32: return ncclFloat32;
    case NcclDataType::kFloat16: return ncclFloat16;
    case NcclDataType::kBFloat16: return ncclBfloat16;
    case NcclDataType::kFloat64: return ncclFloat64;
    case NcclDataType::kInt32: return ncclInt32;
    case NcclDataType::kInt64: return ncclInt64;
    case NcclDataType::kUInt8: return ncclUint8;
    case NcclDataType::kInt8: return ncclInt8;
  }
  return ncclFloat32;
}

// Short sleeps keep the poll cheap without adding visible latency to a step.
void PollPause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

// Polls the communicator until it leaves ncclInProgress; returns the final state or
// ncclInProgress itself when the deadline passed first.
ncclResult_t PollComm(ncclComm_t comm, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    PollPause();
  }
}

}  // namespace

struct NcclComm::Impl {
  ncclComm_t comm = nullptr;
  cudaEvent_t event = nullptr;  // recorded by Wait
  void* scratch = nullptr;      // one int32 on the device, for Barrier

  void Abort() {
    if (comm != nullptr) {
      ncclCommAbort(comm);  // also frees the communicator
      comm = nullptr;
    }
  }
  ~Impl() {
    Abort();
    if (event != nullptr) cudaEventDestroy(event);
    if (scratch != nullptr) cudaFree(scratch);
  }
};

absl::StatusOr<std::string> NcclGetUniqueId() {
  ncclUniqueId id;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  static_assert(sizeof(id.internal) == kNcclUniqueIdBytes, "ncclUniqueId size changed");
  return std::string(id.internal, sizeof(id.internal));
}

NcclComm::NcclComm(std::unique_ptr<Impl> impl, int rank, int world_size, int device,
                   int timeout_ms)
    : impl_(std::move(impl)), rank_(rank), world_size_(world_size), device_(device),
      timeout_ms_(timeout_ms) {}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(const NcclOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: rank ", o.rank, " invalid for world size ", o.world_size));
  }
  if (o.unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL: unique id must be ", kNcclUniqueIdBytes,
                                                   " bytes, got ", o.unique_id.size()));
  }
  if (o.timeout_ms <= 0) return absl::InvalidArgumentError("NCCL: timeout_ms must be > 0");
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(o.device), "cudaSetDevice"));

  auto impl = std::make_unique<Impl>();
  RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&impl->event, cudaEventDisableTiming),
                             "cudaEventCreate"));
  RETURN_IF_ERROR(CudaStatus(cudaMalloc(&impl->scratch, sizeof(int32_t)), "cudaMalloc"));
  RETURN_IF_ERROR(CudaStatus(cudaMemset(impl->scratch, 0, sizeof(int32_t)), "cudaMemset"));

  ncclUniqueId id;
  std::memcpy(id.internal, o.unique_id.data(), kNcclUniqueIdBytes);
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.timeout_ms);
#if DITSERVE_NCCL_NONBLOCKING
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&impl->comm, o.world_size, id, o.rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclStatus(r, "ncclCommInitRankConfig", impl->comm);
    return absl::UnavailableError(s.message());  // Impl's destructor aborts a half-made comm
  }
  if (impl->comm == nullptr) return absl::InternalError("ncclCommInitRankConfig gave no comm");
  r = PollComm(impl->comm, deadline);
  if (r == ncclInProgress) {
    return absl::UnavailableError(absl::StrCat("NCCL init: rank ", o.rank, " of ", o.world_size,
                                               " timed out after ", o.timeout_ms,
                                               " ms waiting for its peers"));
  }
  if (r != ncclSuccess) {
    absl::Status s = NcclStatus(r, "NCCL init", impl->comm);
    return absl::UnavailableError(s.message());
  }
#else
  // Old NCCL: init blocks until every rank has joined and cannot be bounded.
  ncclResult_t r = ncclCommInitRank(&impl->comm, o.world_size, id, o.rank);
  if (r != ncclSuccess) {
    absl::Status s = NcclStatus(r, "ncclCommInitRank", impl->comm);
    return absl::UnavailableError(s.message());
  }
#endif
  return std::unique_ptr<NcclComm>(
      new NcclComm(std::move(impl), o.rank, o.world_size, o.device, o.timeout_ms));
}

NcclComm::~NcclComm() {
  if (impl_->comm == nullptr) return;
  if (broken_.ok()) {
    // Flush this rank's outstanding operations, then free; abort if that does not settle.
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    if (ncclCommFinalize(impl_->comm) != ncclSuccess ||
        PollComm(impl_->comm, deadline) != ncclSuccess) {
      impl_->Abort();
      return;
    }
    ncclCommDestroy(impl_->comm);
    impl_->comm = nullptr;
  }
  // Impl's destructor aborts a broken communicator.
}

absl::Status NcclComm::Fail(absl::Status status) {
  if (status.ok()) return status;
  if (broken_.ok()) broken_ = status;
  impl_->Abort();
  return broken_;
}

absl::Status NcclComm::Settle(const char* what) {
#if DITSERVE_NCCL_NONBLOCKING
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  const ncclResult_t r = PollComm(impl_->comm, deadline);
  if (r == ncclInProgress) {
    return Fail(absl::UnavailableError(
        absl::StrCat(what, ": NCCL call did not complete within ", timeout_ms_, " ms")));
  }
  if (r != ncclSuccess) {
    absl::Status s = NcclStatus(r, what, impl_->comm);
    return Fail(absl::UnavailableError(s.message()));  // asynchronous: the group is broken
  }
#endif
  return absl::OkStatus();
}

absl::Status NcclComm::AllReduce(const void* send, void* recv, size_t count, NcclDataType type,
                                 NcclReduceOp op, cudaStream_t stream) {
  RETURN_IF_ERROR(Usable());
  const ncclRedOp_t nop = op == NcclReduceOp::kSum ? ncclSum : ncclMax;
  RETURN_IF_ERROR(Fail(NcclStatus(
      ncclAllReduce(send, recv, count, ToNccl(type), nop, impl_->comm, stream), "ncclAllReduce",
      impl_->comm)));
  return Settle("ncclAllReduce");
}

absl::Status NcclComm::Broadcast(const void* send, void* recv, size_t count, NcclDataType type,
                                 int root, cudaStream_t stream) {
  RETURN_IF_ERROR(Usable());
  if (root < 0 || root >= world_size_) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("Broadcast: root ", root, " out of range for world size ", world_size_)));
  }
  RETURN_IF_ERROR(Fail(NcclStatus(
      ncclBroadcast(send, recv, count, ToNccl(type), root, impl_->comm, stream), "ncclBroadcast",
      impl_->comm)));
  return Settle("ncclBroadcast");
}

absl::Status NcclComm::AllGather(const void* send, void* recv, size_t send_count,
                                 NcclDataType type, cudaStream_t stream) {
  RETURN_IF_ERROR(Usable());
  RETURN_IF_ERROR(Fail(NcclStatus(
      ncclAllGather(send, recv, send_count, ToNccl(type), impl_->comm, stream), "ncclAllGather",
      impl_->comm)));
  return Settle("ncclAllGather");
}

absl::Status NcclComm::Wait(cudaStream_t stream) {
  RETURN_IF_ERROR(Usable());
  RETURN_IF_ERROR(Fail(CudaStatus(cudaEventRecord(impl_->event, stream), "cudaEventRecord")));
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    const cudaError_t q = cudaEventQuery(impl_->event);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) return Fail(CudaStatus(q, "NCCL Wait: cudaEventQuery"));
    // A peer's failure shows up here while our kernels still wait for it.
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(impl_->comm, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      absl::Status s = NcclStatus(r != ncclSuccess ? r : state, "NCCL Wait", impl_->comm);
      return Fail(absl::UnavailableError(s.message()));
    }
    if (Clock::now() >= deadline) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "NCCL Wait: rank ", rank_, " of ", world_size_, ": collectives did not finish within ",
          timeout_ms_, " ms (a peer is gone or stuck); communicator aborted")));
    }
    PollPause();
  }
  return absl::OkStatus();
}

absl::Status NcclComm::Barrier(cudaStream_t stream) {
  RETURN_IF_ERROR(
      AllReduce(impl_->scratch, impl_->scratch, 1, NcclDataType::kInt32, NcclReduceOp::kSum,
                stream));
  return Wait(stream);
}

}  // namespace ditserve::comm
