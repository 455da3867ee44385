#include "common/remove_tree.h"
#include "tests/unit/sharding_test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "sharding/safetensors_writer.h"
#include "sharding/torch_tensor.h"

namespace ditserve::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ditserve-sharding-XXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  if (made == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  path_ = tmpl;
}

TempDir::~TempDir() {
  (void)ditserve::RemoveTree(path_);
}

void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

void WriteRawSafetensors(const std::string& path, const std::string& header,
                         const std::string& data, int64_t declared_len) {
  const uint64_t len = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  WriteTextFile(path, bytes + header + data);
}

void WriteTorchSafetensors(const std::string& path,
                           const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<torch::Tensor> keep;
  std::vector<sharding::TensorToWrite> out;
  for (const auto& [name, t] : tensors) {
    keep.push_back(t.cpu().contiguous());
    auto dtype = sharding::SafetensorsDType(keep.back().scalar_type());
    ASSERT_TRUE(dtype.ok()) << dtype.status();
    out.push_back({name, *dtype, keep.back().sizes().vec(), keep.back().data_ptr()});
  }
  auto status = sharding::WriteSafetensors(path, out, {{"format", "pt"}});
  ASSERT_TRUE(status.ok()) << status;
}

void WriteComponent(const std::string& dir, const nlohmann::json& config,
                    const std::map<std::string, torch::Tensor>& tensors) {
  std::filesystem::create_directories(dir);
  WriteTextFile(dir + "/config.json", config.dump(2));
  WriteTorchSafetensors(dir + "/diffusion_pytorch_model.safetensors", tensors);
}

}  // namespace ditserve::testing
