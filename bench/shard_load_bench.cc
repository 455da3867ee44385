// Per-rank loader benchmark: peak RSS against shard size, and load throughput from the page cache.
//
//   ditserve-bench-shard-load [--dir /tmp/ditserve-bench-ckpt] [--blocks 4] [--rank 0] [--world 4]
//                             [--staging-mb 64] [--dtype bf16|f32|f16] [--repeat 3]
//
// Generates (once) a random bf16 checkpoint of `blocks` blocks, 344 MiB each (colwise and rowwise
// Linears plus a replicated one), warms the page cache, then loads rank `rank` of `world` with the
// given staging buffer `repeat` times. Before each load it resets the peak-RSS mark
// (/proc/self/clear_refs "5"); after it, it prints one JSON line with the shard bytes, VmHWM, and
// GB/s (stored bytes read by this rank / wall time). Last, it times first-touching (memset of
// fresh memory) as many bytes as the shard holds: no loader that materialises the shard can beat
// that on the same machine, so it is the number to compare GB/s against.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "sharding/checkpoint.h"
#include "sharding/loader.h"
#include "sharding/safetensors_writer.h"

namespace {

using namespace ditserve::sharding;

struct BenchOptions {
  std::string dir = "/tmp/ditserve-bench-ckpt";
  int64_t blocks = 4;
  int64_t rank = 0;
  int64_t world = 4;
  int64_t staging_mb = 64;
  std::string dtype = "bf16";
  int64_t repeat = 3;
};

constexpr int64_t kD = 4096;

std::vector<TensorToWrite> Layout(int64_t blocks) {
  std::vector<TensorToWrite> t;
  for (int64_t b = 0; b < blocks; ++b) {
    const std::string p = absl::StrCat("blocks.", b, ".");
    t.push_back({p + "attn.to_q.weight", DType::kBF16, {kD, kD}, nullptr});
    t.push_back({p + "attn.to_out.0.weight", DType::kBF16, {kD, kD}, nullptr});
    t.push_back({p + "ff.proj.weight", DType::kBF16, {4 * kD, kD}, nullptr});
    t.push_back({p + "ff.out.weight", DType::kBF16, {kD, 4 * kD}, nullptr});
    t.push_back({p + "norm.linear.weight", DType::kBF16, {3 * 1024, kD}, nullptr});
  }
  return t;
}

TpPlan BenchPlan() {
  TpPlan p;
  p.rules = {{"blocks.*.attn.to_q", TpStyle::kColwise, {}},
             {"blocks.*.attn.to_out.0", TpStyle::kRowwise, {}},
             {"blocks.*.ff.proj", TpStyle::kColwise, {}},
             {"blocks.*.ff.out", TpStyle::kRowwise, {}}};
  return p;
}

// Streams random bf16 values into the file, 16 MiB at a time (never the whole file in memory).
bool Generate(const std::string& dir, int64_t blocks) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"_class_name": "BenchModel", "num_attention_heads": 32})";
  const auto tensors = Layout(blocks);
  const std::string path = dir + "/diffusion_pytorch_model.safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const std::string header = SafetensorsHeaderBytes(tensors);
  std::fwrite(header.data(), 1, header.size(), f);
  uint64_t total = 0;
  for (const auto& t : tensors) {
    uint64_t n = 2;
    for (int64_t d : t.shape) n *= d;
    total += n;
  }
  std::vector<uint16_t> chunk(8u << 20);
  std::mt19937_64 rng(1234);
  for (uint64_t written = 0; written < total;) {
    for (size_t i = 0; i < chunk.size(); i += 4) {
      uint64_t r = rng();
      for (int k = 0; k < 4; ++k) {
        // bf16 in roughly [-2, 2]: random sign/mantissa, exponent 120..128.
        uint16_t v = static_cast<uint16_t>(r >> (16 * k));
        chunk[i + k] = static_cast<uint16_t>((v & 0x807f) | ((120 + (v >> 7) % 9) << 7));
      }
    }
    const uint64_t take = std::min<uint64_t>(total - written, chunk.size() * 2);
    std::fwrite(chunk.data(), 1, take, f);
    written += take;
  }
  return std::fclose(f) == 0;
}

uint64_t StatusKb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::string(key).size() + 1));
  }
  return 0;
}

// Seconds to first-touch `bytes` of fresh anonymous memory: the floor for any loader that
// materialises a shard of that size (page faults + zeroing), measured on this machine.
double FirstTouchSeconds(uint64_t bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  std::memset(p, 1, bytes);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::munmap(p, bytes);
  return s;
}

void WarmPageCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(16 << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  ditserve::FlagParser p("ditserve-bench-shard-load", "Per-rank loader: peak RSS and GB/s.");
  p.AddString("dir", &o.dir, "checkpoint folder (generated when absent)");
  p.AddInt("blocks", &o.blocks, "blocks of 344 MiB in the generated checkpoint");
  p.AddInt("rank", &o.rank, "rank to load");
  p.AddInt("world", &o.world, "tensor-parallel degree");
  p.AddInt("staging-mb", &o.staging_mb, "staging buffer, MiB");
  p.AddString("dtype", &o.dtype, "target dtype: bf16 | f32 | f16");
  p.AddInt("repeat", &o.repeat, "loads to time");
  if (auto s = p.Parse(argc, argv); !s.ok() || p.HelpRequested()) {
    std::fprintf(stderr, "%s\n%s", std::string(s.message()).c_str(), p.Help().c_str());
    return s.ok() ? 0 : 2;
  }
  const std::string file = o.dir + "/diffusion_pytorch_model.safetensors";
  if (!std::filesystem::exists(file)) {
    std::fprintf(stderr, "generating %s ...\n", file.c_str());
    if (!Generate(o.dir, o.blocks)) {
      std::fprintf(stderr, "cannot write %s\n", file.c_str());
      return 1;
    }
  }
  WarmPageCache(file);
  auto ckpt = ComponentCheckpoint::Open(o.dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "%s\n", ckpt.status().ToString().c_str());
    return 1;
  }
  const TpPlan plan = BenchPlan();
  LoadOptions opts;
  opts.staging_buffer_bytes = static_cast<uint64_t>(o.staging_mb) << 20;
  opts.dtype = o.dtype == "f32" ? torch::kFloat32 : o.dtype == "f16" ? torch::kFloat16
                                                                      : torch::kBFloat16;
  uint64_t read_bytes = 0;
  opts.progress = [&](uint64_t done, uint64_t) { read_bytes = done; };
  uint64_t shard_bytes = 0;
  for (int64_t i = 0; i < o.repeat; ++i) {
    // Reset the peak-RSS mark to the current RSS, so VmHWM below is this load's peak.
    std::ofstream("/proc/self/clear_refs") << "5";
    const uint64_t base_kb = StatusKb("VmRSS:");
    const auto t0 = std::chrono::steady_clock::now();
    auto sd = LoadShard(**ckpt, &plan, static_cast<int>(o.rank), static_cast<int>(o.world), opts);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!sd.ok()) {
      std::fprintf(stderr, "%s\n", sd.status().ToString().c_str());
      return 1;
    }
    const uint64_t hwm_kb = StatusKb("VmHWM:");
    shard_bytes = sd->TotalBytes();
    nlohmann::json line = {
        {"rank", o.rank},
        {"world", o.world},
        {"dtype", o.dtype},
        {"staging_mib", o.staging_mb},
        {"file_bytes", std::filesystem::file_size(file)},
        {"shard_bytes", sd->TotalBytes()},
        {"stored_bytes_read", read_bytes},
        {"rss_before_kib", base_kb},
        {"vmhwm_kib", hwm_kb},
        {"peak_minus_before_mib", (hwm_kb - base_kb) / 1024.0},
        {"shard_mib", sd->TotalBytes() / 1048576.0},
        {"seconds", secs},
        {"gb_per_s", read_bytes / secs / 1e9},
    };
    std::cout << line.dump() << std::endl;
  }
  const double touch = FirstTouchSeconds(shard_bytes);
  nlohmann::json baseline = {{"first_touch_baseline_bytes", shard_bytes},
                             {"first_touch_seconds", touch},
                             {"first_touch_gb_per_s", shard_bytes / touch / 1e9}};
  std::cout << baseline.dump() << std::endl;
  return 0;
}
