#include "comm/gloo_communicator.h"

#include <signal.h>

#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "comm/stats_recorder.h"

#ifndef USE_C10D_GLOO
#error "gloo_communicator.cc needs USE_C10D_GLOO (ProcessGroupGloo.hpp is empty without it)"
#endif

namespace ditserve::comm {
namespace {

// Extra time Work::wait allows beyond Gloo's own I/O timeout, which normally fires first.
constexpr std::chrono::milliseconds kWaitGrace{2000};

std::string ExceptionText(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

void IgnoreSigpipeOnce() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

bool GlooSupports(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32:
    case torch::kFloat64:
    case torch::kBFloat16:
    case torch::kFloat16:
    case torch::kInt32:
    case torch::kInt64:
    case torch::kUInt8:
    case torch::kInt8:
      return true;
    default:
      return false;
  }
}

absl::Status CheckTensor(const char* what, const torch::Tensor& t) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(what, ": undefined tensor"));
  if (!t.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the Gloo communicator takes CPU tensors, got ", t.device().str()));
  }
  if (!GlooSupports(t.scalar_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unsupported dtype ", c10::toString(t.scalar_type())));
  }
  return absl::OkStatus();
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options, c10::intrusive_ptr<c10d::Store> store,
                   c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : rank_(options.rank), world_size_(options.world_size),
        wait_timeout_(std::chrono::milliseconds(options.timeout_ms) + kWaitGrace),
        store_(std::move(store)), pg_(std::move(pg)) {}

  ~GlooCommunicator() override {
    // The process group joins its worker threads; none is busy (every call waited for its work,
    // and a work that outlived its wait was leaked in Fail), so this does not block.
    pg_.reset();
    store_.reset();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  absl::Status AllReduceSum(torch::Tensor& tensor) override {
    RETURN_IF_ERROR(Usable());
    RETURN_IF_ERROR(CheckTensor("AllReduceSum", tensor));
    ScopedAllReduceTimer timer(stats_, tensor.nbytes());
    return AllReduce("AllReduceSum", tensor, c10d::ReduceOp::SUM);
  }

  absl::Status AllReduceMax(torch::Tensor& tensor) override {
    RETURN_IF_ERROR(Usable());
    RETURN_IF_ERROR(CheckTensor("AllReduceMax", tensor));
    return AllReduce("AllReduceMax", tensor, c10d::ReduceOp::MAX);
  }

  absl::Status Broadcast(torch::Tensor& tensor, int root) override {
    RETURN_IF_ERROR(Usable());
    RETURN_IF_ERROR(CheckTensor("Broadcast", tensor));
    if (root < 0 || root >= world_size_) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("Broadcast: root ", root, " out of range for world size ", world_size_)));
    }
    torch::Tensor alias = MovableAlias(tensor);
    return InPlace("Broadcast", alias, [&](std::vector<at::Tensor>& buf) {
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      return pg_->broadcast(buf, opts);
    });
  }

  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    RETURN_IF_ERROR(Usable());
    RETURN_IF_ERROR(CheckTensor("AllGather", input));
    RETURN_IF_ERROR(CheckTensor("AllGather", output));
    if (output.scalar_type() != input.scalar_type() || !output.is_contiguous() ||
        output.numel() != input.numel() * world_size_) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "AllGather: needs a contiguous output of the input's dtype with ", world_size_,
          " x the input's elements")));
    }
    // Gloo copies each rank's piece into the given tensors; views of `output` put them in place.
    return Run("AllGather", [&] {
      std::vector<at::Tensor> in{MovableAlias(input).contiguous()};
      std::vector<std::vector<at::Tensor>> out(1);
      torch::Tensor flat = MovableAlias(output).view({-1});
      const int64_t n = input.numel();
      for (int r = 0; r < world_size_; ++r) {
        out[0].push_back(flat.narrow(0, r * n, n).view(input.sizes()));
      }
      return pg_->allgather(out, in);
    });
  }

  absl::Status Barrier() override {
    RETURN_IF_ERROR(Usable());
    return Run("Barrier", [&] { return pg_->barrier(); });
  }

  CommStats Stats() const override { return stats_.Snapshot(); }
  void RecordReplayedAllReduces(uint64_t count, uint64_t bytes) override {
    stats_.RecordReplayed(count, bytes);
  }

 private:
  absl::Status Usable() const { return broken_; }

  absl::Status AllReduce(const char* what, torch::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
    auto issue = [&](std::vector<at::Tensor>& buf) {
      c10d::AllreduceOptions opts;
      opts.reduceOp = op;
      return pg_->allreduce(buf, opts);
    };
    if (tensor.scalar_type() != torch::kBFloat16) return InPlace(what, tensor, issue);
    // LibTorch 1.13's Gloo has no bfloat16 arithmetic: reduce in float32 and round once. For two
    // ranks this is bit-identical to a bfloat16 add; for more it rounds less often.
    torch::Tensor wide;
    RETURN_IF_ERROR(Fail(GuardTorchStatus(what, [&] { wide = tensor.to(torch::kFloat32); })));
    RETURN_IF_ERROR(InPlace(what, wide, issue));
    return Fail(GuardTorchStatus(what, [&] { tensor.copy_(wide); }));
  }

  // Pure data movement does not care about the element type: bfloat16 travels as float16 bits.
  static torch::Tensor MovableAlias(const torch::Tensor& t) {
    return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t;
  }

  // Gloo wants contiguous tensors: a non-contiguous one goes through a contiguous copy.
  template <typename Issue>
  absl::Status InPlace(const char* what, torch::Tensor& tensor, Issue&& issue) {
    const bool direct = tensor.is_contiguous();
    std::vector<at::Tensor> buf;
    RETURN_IF_ERROR(Run(what, [&] {
      buf.push_back(direct ? tensor : tensor.contiguous());
      return issue(buf);
    }));
    if (direct) return absl::OkStatus();
    return Fail(GuardTorchStatus(what, [&] { tensor.copy_(buf[0]); }));
  }

  // Issues one Gloo work and waits for it; any failure breaks this communicator.
  template <typename Issue>
  absl::Status Run(const char* what, Issue&& issue) {
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = issue();
      work->wait(wait_timeout_);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      const bool stuck = work && !work->isCompleted();
      return Fail(absl::UnavailableError(absl::StrCat(what, " (Gloo, rank ", rank_, " of ",
                                                      world_size_, "): ", ExceptionText(e))),
                  stuck);
    }
  }

  // Records the first error and tears the group down so the peers' pending receives fail now.
  // If a work is still running (Gloo ignored its own timeout) the process group cannot be
  // destroyed without joining that thread, so it is leaked on purpose rather than hang.
  absl::Status Fail(absl::Status status, bool work_stuck = false) {
    if (status.ok()) return status;
    if (broken_.ok()) broken_ = status;
    if (work_stuck) {
      (void)pg_.release();
    } else {
      pg_.reset();
    }
    return status;
  }

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds wait_timeout_;
  c10::intrusive_ptr<c10d::Store> store_;  // rank 0: hosts the TCPStore server
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  absl::Status broken_;  // job thread only
  StatsRecorder stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo: rank ", o.rank, " invalid for world size ", o.world_size));
  }
  if (o.store_port <= 0 || o.store_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("Gloo: bad store port ", o.store_port));
  }
  if (o.group_id.empty()) return absl::InvalidArgumentError("Gloo: group_id must be non-empty");
  if (o.timeout_ms <= 0) return absl::InvalidArgumentError("Gloo: timeout_ms must be > 0");
  IgnoreSigpipeOnce();

  const std::chrono::milliseconds timeout(o.timeout_ms);
  const std::chrono::milliseconds rendezvous_timeout(
      o.rendezvous_timeout_ms > 0 ? o.rendezvous_timeout_ms : o.timeout_ms);
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  try {
    c10d::TCPStoreOptions store_opts;
    store_opts.port = static_cast<uint16_t>(o.store_port);
    store_opts.isServer = o.rank == 0;
    store_opts.numWorkers = static_cast<size_t>(o.world_size);
    store_opts.waitWorkers = false;  // the Gloo rendezvous below waits for everyone anyway
    store_opts.timeout = rendezvous_timeout;  // also bounds connecting to rank 0's server
    auto tcp = c10::make_intrusive<c10d::TCPStore>(o.store_host, store_opts);
    store = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("ditserve/", o.group_id, "/"),
                                                   tcp);
    // Wait here for everyone under the rendezvous timeout: Gloo's own connection set-up waits
    // for its peers under the (shorter) collective timeout.
    store->set(absl::StrCat("joined/", o.rank), std::vector<uint8_t>{1});
    std::vector<std::string> everyone;
    for (int r = 0; r < o.world_size; ++r) everyone.push_back(absl::StrCat("joined/", r));
    store->wait(everyone, rendezvous_timeout);
    tcp->setTimeout(timeout);
    auto pg_opts = c10d::ProcessGroupGloo::Options::create(timeout);
    pg_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.listen_host));
    pg_opts->threads = 1;  // one collective at a time per communicator
    pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world_size, pg_opts);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("Gloo group '", o.group_id, "' rank ", o.rank,
                                               " of ", o.world_size, " via ", o.store_host, ":",
                                               o.store_port, ": ", ExceptionText(e)));
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<GlooCommunicator>(o, std::move(store), std::move(pg)));
}

}  // namespace ditserve::comm
