// `ditserve-tool forward --model DIR --inputs FILE --prefix P --output FILE [--tp N]
//  [--device cpu|cuda] [--dtype float32|bfloat16] [--weights dtype|fp8] [--replicate-modulation]`:
//  one transformer
// forward, as the forward harness for parity checks. Each argument the model takes is read from
// tensor "<P><argument>" of FILE
// (e.g. prefix "flux1.step0.in." in fixtures/reference.safetensors); the output is written as one
// float32 tensor "out" to a safetensors file.
//
// --tp N > 1 runs N real worker processes: the command re-executes itself N times with the hidden
// flags --rank r --world N --store-port P --group-id G; the ranks load their own shard (the
// model's built-in TP plan with the AdaLN modulation sharded, as served; --replicate-modulation:
// the reference's plan), join a Gloo group whose TCPStore rank 0 hosts, run the forward
// together and rank 0 writes the output. The parent waits for all of them; if one fails it stops
// the others, and the exit code is non-zero.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "models/transformer_factory.h"
#include "sharding/checkpoint.h"
#include "sharding/loader.h"
#include "sharding/pipeline_index.h"
#include "sharding/safetensors_writer.h"
#include "sharding/torch_tensor.h"
#include "sharding/tp_plan.h"
#include "tools/dtype_flag.h"
#include "tools/tool_registry.h"
#include "comm/free_port.h"
#include "comm/local_communicator.h"
#if defined(DITSERVE_HAVE_GLOO)
#include "comm/gloo_communicator.h"
#endif

namespace ditserve::tools {
namespace {

struct ForwardToolOptions {
  std::string model;
  std::string inputs;
  std::string prefix;
  std::string output;
  int64_t tp = 1;
  std::string device = "cpu";
  std::string dtype = "float32";
  std::string weights = "dtype";  // fp8: models/common/fp8_linear.h (cuda, bfloat16)
  // Hidden: set by the parent for its worker processes.
  int64_t rank = -1;
  int64_t world = 0;
  int64_t store_port = 0;
  std::string group_id;
  int64_t timeout_ms = 120000;
  bool replicate_modulation = false;  // the reference's plan (as the frontend's flag)
};

absl::StatusOr<torch::Device> ParseDevice(const std::string& s, int rank) {
  ASSIGN_OR_RETURN(const DeviceKind kind, ParseDeviceKind(s, "--device"));
  if (kind == DeviceKind::kCpu) return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError("--device cuda: this build/host has no CUDA device");
  }
  return torch::Device(torch::kCUDA,
                       static_cast<c10::DeviceIndex>(rank % torch::cuda::device_count()));
}

// Loads this rank's shard, runs the forward on `comm`, and (rank 0) writes the output.
absl::Status RunRank(const ForwardToolOptions& o, comm::Communicator* comm) {
  const int rank = comm->rank(), world = comm->world_size();
  ASSIGN_OR_RETURN(sharding::DType flag_dtype,
                   ParseDTypeFlag(o.dtype, {sharding::DType::kF32, sharding::DType::kBF16}));
  ASSIGN_OR_RETURN(torch::ScalarType dtype, sharding::TorchDType(flag_dtype));
  ASSIGN_OR_RETURN(torch::Device device, ParseDevice(o.device, rank));
  models::TransformerLoadOptions model_options;
  ASSIGN_OR_RETURN(model_options.weights, models::ParseWeightFormat(o.weights));
  if (model_options.weights == models::WeightFormat::kFp8) {
    RETURN_IF_ERROR(models::CheckFp8Supported(device, dtype));
  }
  ASSIGN_OR_RETURN(std::string dir, sharding::ResolveComponentDir(o.model, "transformer"));
  ASSIGN_OR_RETURN(auto ckpt, sharding::ComponentCheckpoint::Open(dir));
  sharding::LoadOptions load;
  load.device = device;
  load.dtype = dtype;
  // tp = 1 runs unsharded, exactly as diffusers without parallelism does.
  std::optional<sharding::TpPlan> plan;
  if (world > 1) {
    ASSIGN_OR_RETURN(plan, sharding::BuiltinTpPlan(ckpt->class_name(), ckpt->config()));
    if (!o.replicate_modulation) sharding::AddModulationSharding(&*plan);
  }
  ASSIGN_OR_RETURN(auto sd, sharding::LoadShard(*ckpt, plan ? &*plan : nullptr, rank, world, load));
  ASSIGN_OR_RETURN(auto model, models::CreateTransformer(ckpt->config(), sd, comm, model_options));

  ASSIGN_OR_RETURN(auto file, sharding::ReadAllTensors(o.inputs));
  std::map<std::string, torch::Tensor> args;
  for (const auto& name : model->RequiredArguments()) {
    auto it = file.find(o.prefix + name);
    if (it == file.end()) {
      return absl::NotFoundError(absl::StrCat(o.inputs, " has no tensor '", o.prefix, name,
                                              "' (a required argument of ", model->class_name(), ")"));
    }
    args[name] = it->second;
  }
  for (const auto& name : model->OptionalArguments()) {
    auto it = file.find(o.prefix + name);
    if (it != file.end()) args[name] = it->second;
  }
  ASSIGN_OR_RETURN(torch::Tensor out, model->Forward(args));
  if (rank != 0) return absl::OkStatus();
  auto host = out.to(torch::kCPU, torch::kFloat32).contiguous();
  sharding::TensorToWrite t;
  t.name = "out";
  t.dtype = sharding::DType::kF32;
  t.shape.assign(host.sizes().begin(), host.sizes().end());
  t.data = host.data_ptr();
  return sharding::WriteSafetensors(o.output, {t});
}

absl::Status RunWorkerProcess(const ForwardToolOptions& o) {
#if defined(DITSERVE_HAVE_GLOO)
  comm::GlooOptions g;
  g.rank = static_cast<int>(o.rank);
  g.world_size = static_cast<int>(o.world);
  g.store_port = static_cast<int>(o.store_port);
  g.group_id = o.group_id;
  g.timeout_ms = static_cast<int>(o.timeout_ms);
  ASSIGN_OR_RETURN(auto comm, comm::CreateGlooCommunicator(g));
  return RunRank(o, comm.get());
#else
  return absl::UnimplementedError("this build has no Gloo communicator for worker processes");
#endif
}

// Spawns the N worker processes and waits for them; stops the survivors when one fails.
absl::Status SpawnWorkers(const ForwardToolOptions& o, int argc, const char* const* argv) {
  ASSIGN_OR_RETURN(int port, comm::PickFreePort("127.0.0.1"));
  const std::string group = absl::StrCat("forward-", getpid());
  std::vector<Subprocess> workers;
  for (int r = 0; r < o.tp; ++r) {
    SpawnOptions spawn({"/proc/self/exe"});
    spawn.argv.insert(spawn.argv.end(), argv, argv + argc);
    for (const std::string& extra :
         {std::string("--rank"), std::to_string(r), std::string("--world"), std::to_string(o.tp),
          std::string("--store-port"), std::to_string(port), std::string("--group-id"), group}) {
      spawn.argv.push_back(extra);
    }
    // On a failed spawn, the workers already started are killed as `workers` goes out of scope.
    ASSIGN_OR_RETURN(Subprocess worker, Subprocess::Spawn(spawn));
    workers.push_back(std::move(worker));
  }
  absl::Status status;
  size_t running = workers.size();
  while (running > 0) {
    for (Subprocess& w : workers) {
      std::optional<ExitStatus> exit = w.TryWait();
      if (!exit) continue;
      --running;
      if (!exit->success() && status.ok()) {
        status = absl::InternalError(absl::StrCat("a worker process failed (", exit->ToString(), ")"));
        for (Subprocess& other : workers) other.Kill(SIGTERM);
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

int ForwardMain(int argc, const char* const* argv) {
  ForwardToolOptions o;
  FlagParser p("ditserve-tool forward", "Runs one transformer forward on named inputs.");
  p.AddString("model", &o.model, "pipeline root or transformer folder");
  p.AddString("inputs", &o.inputs, "safetensors file holding the arguments");
  p.AddString("prefix", &o.prefix, "name prefix of the arguments in --inputs");
  p.AddString("output", &o.output, "safetensors file to write (tensor 'out', float32)");
  p.AddInt("tp", &o.tp, "tensor-parallel degree (N > 1: N worker processes)");
  p.AddString("device", &o.device, "cpu | cuda");
  p.AddString("dtype", &o.dtype, "float32 | bfloat16");
  p.AddString("weights", &o.weights, "dtype | fp8 (FP8 block GEMMs; cuda, bfloat16)");
  p.AddInt("timeout-ms", &o.timeout_ms, "bound on each collective and on the rendezvous");
  p.AddBool("replicate-modulation", &o.replicate_modulation,
            "the reference's plan: AdaLN modulation replicated (default: sharded, as served)");
  p.AddInt("rank", &o.rank, "(internal) worker rank");
  p.AddInt("world", &o.world, "(internal) worker group size");
  p.AddInt("store-port", &o.store_port, "(internal) rank 0's TCPStore port");
  p.AddString("group-id", &o.group_id, "(internal) group key prefix");
  if (auto s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), p.Help().c_str());
    return 2;
  }
  if (p.HelpRequested()) {
    std::fprintf(stdout, "%s", p.Help().c_str());
    return 0;
  }
  absl::Status status;
  if (o.model.empty() || o.inputs.empty() || o.output.empty()) {
    status = absl::InvalidArgumentError("--model, --inputs and --output are required");
  } else if (o.tp < 1) {
    status = absl::InvalidArgumentError(absl::StrCat("--tp must be >= 1, got ", o.tp));
  } else if (o.rank >= 0) {
    status = RunWorkerProcess(o);
  } else if (o.tp == 1) {
    auto comm = comm::MakeSingleRankCommunicator();
    status = RunRank(o, comm.get());
  } else if (o.device != "cpu") {
    status = absl::InvalidArgumentError("--tp > 1 runs Gloo worker processes: --device cpu only");
  } else {
    status = SpawnWorkers(o, argc, argv);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ditserve-tool forward%s: %s\n",
                 o.rank >= 0 ? absl::StrCat(" [rank ", o.rank, "]").c_str() : "",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

DITSERVE_TOOL_COMMAND("forward", "run one transformer forward (optionally tensor-parallel)",
                      ForwardMain);

}  // namespace ditserve::tools
