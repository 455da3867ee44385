// comm_probe: one rank of a Gloo group, launched N times by comm_gloo_test.
//
//   comm_probe --rank R --world N --port P --group G [--timeout-ms T] [--mode check|kill|stop]
//              [--victim V]
//
// check: runs every collective and verifies the results against values computed locally for all
//        ranks (data is a function of the rank). Exit 0 when all hold, 1 on a wrong result, 2 on a
//        communicator error.
// kill / stop: after one good all-reduce the victim rank SIGKILLs / SIGSTOPs itself; the others
//        issue one more all-reduce, which must fail. Survivors print "elapsed_ms=<n>" and exit
//        3 on UNAVAILABLE (expected), 4 if it succeeded, 5 on any other error code.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "comm/agree.h"
#include "comm/gloo_communicator.h"

namespace ditserve::comm {
namespace {

torch::Tensor RankData(int rank, std::vector<int64_t> shape, torch::Dtype dtype) {
  at::Generator gen = compat::SeededCpuGenerator(7000 + rank);
  return (torch::randn(shape, gen, torch::kFloat64) * (1.0 + rank)).to(dtype);
}

bool BitEqual(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

double RelErr(const torch::Tensor& got, const torch::Tensor& want) {
  auto g = got.to(torch::kFloat64);
  auto w = want.to(torch::kFloat64);
  return (g - w).abs().max().item<double>() / std::max(1e-30, w.abs().max().item<double>());
}

struct Checker {
  int rank;
  int failures = 0;
  void Expect(bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: CHECK FAILED: %s\n", rank, what.c_str());
    }
  }
};

// Every rank must hold bit-identical copies of `t`: gather them all and compare with ours.
absl::Status ExpectSameEverywhere(Communicator& c, const torch::Tensor& t, Checker& check,
                                  const std::string& what) {
  std::vector<int64_t> shape{c.world_size()};
  for (auto s : t.sizes()) shape.push_back(s);
  torch::Tensor all = torch::empty(shape, t.options());
  RETURN_IF_ERROR(c.AllGather(t, all));
  for (int r = 0; r < c.world_size(); ++r) {
    check.Expect(BitEqual(all[r], t), absl::StrCat(what, ": rank ", r, " holds different bits"));
  }
  return absl::OkStatus();
}

absl::Status RunChecks(Communicator& c, Checker& check) {
  const int n = c.world_size();
  const int me = c.rank();
  uint64_t sum_calls = 0, sum_bytes = 0;

  for (auto [dtype, tol] : {std::pair<torch::Dtype, double>{torch::kFloat32, 1e-6},
                            {torch::kBFloat16, 2e-2}, {torch::kFloat64, 1e-14}}) {
    torch::Tensor want = torch::zeros({3, 5, 7}, torch::kFloat64);
    for (int r = 0; r < n; ++r) want += RankData(r, {3, 5, 7}, dtype).to(torch::kFloat64);
    torch::Tensor t = RankData(me, {3, 5, 7}, dtype);
    RETURN_IF_ERROR(c.AllReduceSum(t));
    ++sum_calls;
    sum_bytes += t.nbytes();
    check.Expect(RelErr(t, want) < tol,
                 absl::StrCat("AllReduceSum ", c10::toString(dtype), " rel err ", RelErr(t, want)));
    RETURN_IF_ERROR(ExpectSameEverywhere(c, t, check, "AllReduceSum"));
  }

  {  // A large tensor (Gloo splits it into chunks) and a non-contiguous one.
    torch::Tensor want = torch::zeros({1 << 20}, torch::kFloat64);
    for (int r = 0; r < n; ++r) want += RankData(r, {1 << 20}, torch::kFloat32).to(torch::kFloat64);
    torch::Tensor big = RankData(me, {1 << 20}, torch::kFloat32);
    RETURN_IF_ERROR(c.AllReduceSum(big));
    ++sum_calls;
    sum_bytes += big.nbytes();
    check.Expect(RelErr(big, want) < 1e-6, "AllReduceSum 4 MB");

    torch::Tensor want_t = torch::zeros({6, 4}, torch::kFloat64);
    for (int r = 0; r < n; ++r) want_t += RankData(r, {6, 4}, torch::kFloat32).to(torch::kFloat64);
    torch::Tensor nc = RankData(me, {6, 4}, torch::kFloat32).t();
    RETURN_IF_ERROR(c.AllReduceSum(nc));
    ++sum_calls;
    sum_bytes += nc.nbytes();
    check.Expect(RelErr(nc, want_t.t()) < 1e-6, "AllReduceSum non-contiguous");
  }

  {
    torch::Tensor want = RankData(0, {100}, torch::kFloat32);
    for (int r = 1; r < n; ++r) want = torch::maximum(want, RankData(r, {100}, torch::kFloat32));
    torch::Tensor t = RankData(me, {100}, torch::kFloat32);
    RETURN_IF_ERROR(c.AllReduceMax(t));
    check.Expect(BitEqual(t, want), "AllReduceMax float32");
    torch::Tensor i = torch::full({3}, int64_t{10 * me + 1}, torch::kInt64);
    RETURN_IF_ERROR(c.AllReduceMax(i));
    check.Expect(i.equal(torch::full({3}, int64_t{10 * (n - 1) + 1}, torch::kInt64)),
                 "AllReduceMax int64");
  }

  for (int root : {n - 1, 0}) {
    torch::Tensor t = RankData(me, {4, 9}, torch::kBFloat16);
    RETURN_IF_ERROR(c.Broadcast(t, root));
    check.Expect(BitEqual(t, RankData(root, {4, 9}, torch::kBFloat16)),
                 absl::StrCat("Broadcast from ", root));
  }

  {
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(RankData(r, {2, 3, 5}, torch::kFloat32));
    torch::Tensor out = torch::full({2 * n, 3, 5}, -1.0f);
    RETURN_IF_ERROR(c.AllGather(RankData(me, {2, 3, 5}, torch::kFloat32), out));
    check.Expect(BitEqual(out, torch::cat(parts, 0)), "AllGather");
  }

  for (int raiser : {-1, n - 1, 0}) {
    ASSIGN_OR_RETURN(bool stop, AgreeOnFlag(c, me == raiser));
    check.Expect(stop == (raiser >= 0), absl::StrCat("AgreeOnFlag raiser ", raiser));
  }

  RETURN_IF_ERROR(c.Barrier());
  const CommStats stats = c.Stats();
  check.Expect(stats.allreduce_count == sum_calls, "Stats().allreduce_count");
  check.Expect(stats.allreduce_bytes == sum_bytes, "Stats().allreduce_bytes");
  check.Expect(stats.allreduce_seconds > 0, "Stats().allreduce_seconds");

  // Misuse is reported locally and breaks the communicator for good.
  torch::Tensor t = torch::ones({2});
  check.Expect(c.Broadcast(t, n).code() == absl::StatusCode::kInvalidArgument, "bad root");
  check.Expect(!c.Barrier().ok(), "unusable after an error");
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  int64_t rank = 0, world = 1, port = 0, timeout_ms = 20000, victim = 1;
  std::string group = "probe", mode = "check";
  FlagParser p("comm_probe", "One rank of a Gloo communicator test group.");
  p.AddInt("rank", &rank, "this rank");
  p.AddInt("world", &world, "world size");
  p.AddInt("port", &port, "TCPStore port on 127.0.0.1 (rank 0 hosts it)");
  p.AddString("group", &group, "group id (store key prefix)");
  p.AddInt("timeout-ms", &timeout_ms, "collective and rendezvous timeout");
  p.AddString("mode", &mode, "check | kill | stop");
  p.AddInt("victim", &victim, "the rank that dies (kill) or hangs (stop)");
  if (absl::Status s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 64;
  }
  torch::set_num_threads(1);  // N processes share a small machine

  GlooOptions o;
  o.rank = static_cast<int>(rank);
  o.world_size = static_cast<int>(world);
  o.store_port = static_cast<int>(port);
  o.group_id = group;
  o.timeout_ms = static_cast<int>(timeout_ms);
  auto comm = CreateGlooCommunicator(o);
  if (!comm.ok()) {
    std::printf("rank %d: create failed: %s\n", o.rank, comm.status().ToString().c_str());
    return 2;
  }
  Communicator& c = **comm;

  if (mode == "check") {
    Checker check{o.rank};
    absl::Status s = RunChecks(c, check);
    if (!s.ok()) {
      std::printf("rank %d: communicator error: %s\n", o.rank, s.ToString().c_str());
      return 2;
    }
    if (check.failures > 0) return 1;
    std::printf("rank %d: OK\n", o.rank);
    return 0;
  }

  torch::Tensor t = torch::ones({1024});
  if (absl::Status s = c.AllReduceSum(t); !s.ok()) {
    std::printf("rank %d: first all-reduce failed: %s\n", o.rank, s.ToString().c_str());
    return 2;
  }
  if (rank == victim) {
    std::printf("rank %d: going down (%s)\n", o.rank, mode.c_str());
    std::fflush(stdout);
    raise(mode == "kill" ? SIGKILL : SIGSTOP);
    return 6;  // only reached after SIGCONT
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = c.AllReduceSum(t);
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d: elapsed_ms=%lld status=%s\n", o.rank, static_cast<long long>(elapsed),
              s.ToString().c_str());
  if (s.ok()) return 4;
  if (s.code() != absl::StatusCode::kUnavailable) return 5;
  // Later calls fail at once with the same error.
  if (c.Barrier().code() != absl::StatusCode::kUnavailable) return 5;
  return 3;
}

}  // namespace
}  // namespace ditserve::comm

int main(int argc, char** argv) { return ditserve::comm::Main(argc, argv); }
