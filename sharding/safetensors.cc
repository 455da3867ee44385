#include "sharding/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::sharding {
namespace {

struct DTypeEntry {
  absl::string_view name;
  DType dtype;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {"F64", DType::kF64, 8},    {"F32", DType::kF32, 4},         {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2},  {"I64", DType::kI64, 8},         {"I32", DType::kI32, 4},
    {"I16", DType::kI16, 2},    {"I8", DType::kI8, 1},           {"U8", DType::kU8, 1},
    {"BOOL", DType::kBool, 1},  {"F8_E4M3", DType::kF8E4M3, 1},  {"F8_E5M2", DType::kF8E5M2, 1},
};

// Largest header we accept (the format's own reference implementation caps it at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

absl::string_view DTypeName(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

namespace {

// Corrupt-header error for `file`, naming `tensor` when it is not empty.
absl::Status CorruptHeader(const std::string& file, absl::string_view tensor,
                           absl::string_view what) {
  if (tensor.empty()) {
    return absl::DataLossError(absl::StrCat(file, ": corrupt safetensors header: ", what));
  }
  return absl::DataLossError(
      absl::StrCat(file, ": tensor '", tensor, "': corrupt safetensors header: ", what));
}

// nlohmann::json keeps the last of duplicate keys; this SAX pass records the first top-level key
// seen twice instead.
struct DuplicateKeyFinder : nlohmann::json_sax<nlohmann::json> {
  int depth = 0;
  std::set<std::string> seen;
  std::string duplicate;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    ++depth;
    return true;
  }
  bool end_object() override {
    --depth;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth;
    return true;
  }
  bool end_array() override {
    --depth;
    return true;
  }
  bool key(string_t& k) override {
    if (depth == 1 && !seen.insert(k).second && duplicate.empty()) duplicate = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

// The first tensor name the header holds twice; empty when none.
std::string FindDuplicateTensorName(absl::string_view header_json) {
  DuplicateKeyFinder finder;
  nlohmann::json::sax_parse(header_json.begin(), header_json.end(), &finder,
                            nlohmann::detail::input_format_t::json, /*strict=*/true);
  return finder.duplicate;
}

// Checks the "__metadata__" entry and copies it into `metadata` (when not null).
absl::Status ReadHeaderMetadata(const nlohmann::json& entry, const std::string& file,
                                std::map<std::string, std::string>* metadata) {
  if (!entry.is_object()) return CorruptHeader(file, "", "__metadata__ is not an object");
  for (auto m = entry.begin(); m != entry.end(); ++m) {
    if (!m.value().is_string()) {
      return CorruptHeader(file, "", "__metadata__ values must be strings");
    }
    if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
  }
  return absl::OkStatus();
}

// Reads `shape` into info->shape and its element count into *numel.
absl::Status ReadShape(const nlohmann::json& shape, const std::string& file, TensorInfo* info,
                       uint64_t* numel) {
  *numel = 1;
  bool overflow = false;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) {
      return CorruptHeader(file, info->name, "shape entries must be non-negative integers");
    }
    uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    info->shape.push_back(static_cast<int64_t>(v));
    if (v != 0 && *numel > std::numeric_limits<uint64_t>::max() / v) overflow = true;
    *numel *= v;
  }
  if (overflow) return CorruptHeader(file, info->name, "shape is too large");
  return absl::OkStatus();
}

// One tensor's entry: dtype, shape and data offsets, checked against each other and `data_size`.
absl::StatusOr<TensorInfo> ParseTensorEntry(const std::string& name, const nlohmann::json& entry,
                                            uint64_t data_size, const std::string& file) {
  auto bad = [&](absl::string_view what) { return CorruptHeader(file, name, what); };
  if (!entry.is_object()) return bad("entry is not an object");
  auto dt = entry.find("dtype");
  auto sh = entry.find("shape");
  auto off = entry.find("data_offsets");
  if (dt == entry.end() || !dt->is_string()) return bad("missing string 'dtype'");
  if (sh == entry.end() || !sh->is_array()) return bad("missing array 'shape'");
  if (off == entry.end() || !off->is_array() || off->size() != 2) {
    return bad("'data_offsets' must be [begin, end]");
  }
  TensorInfo info;
  info.name = name;
  auto dtype = ParseDType(dt->get<std::string>());
  if (!dtype.ok()) return bad(dtype.status().message());
  info.dtype = *dtype;
  uint64_t numel = 1;
  RETURN_IF_ERROR(ReadShape(*sh, file, &info, &numel));
  for (const auto& o : *off) {
    if (!o.is_number_unsigned()) return bad("data_offsets must be non-negative integers");
  }
  info.begin = (*off)[0].get<uint64_t>();
  info.end = (*off)[1].get<uint64_t>();
  if (info.end < info.begin) return bad("data_offsets end before begin");
  if (info.end > data_size) {
    return bad(absl::StrCat("data_offsets [", info.begin, ", ", info.end,
                            ") run past the data buffer (", data_size, " bytes)"));
  }
  const uint64_t esize = DTypeSize(info.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / esize ||
      numel * esize != info.end - info.begin) {
    return bad(absl::StrCat("byte length ", info.end - info.begin, " does not match dtype ",
                            DTypeName(info.dtype), " x ", numel, " elements"));
  }
  return info;
}

// No two tensors may overlap. Empty tensors occupy no bytes and cannot overlap anything; for the
// rest, sorted by begin, each must start at or after the furthest end seen so far.
absl::Status CheckNoOverlap(const std::vector<TensorInfo>& tensors, const std::string& file) {
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (furthest != nullptr && t->begin < furthest->end) {
      return CorruptHeader(
          file, t->name,
          absl::StrCat("data_offsets [", t->begin, ", ", t->end, ") overlap tensor '",
                       furthest->name, "' [", furthest->begin, ", ", furthest->end, ")"));
    }
    if (furthest == nullptr || t->end > furthest->end) furthest = t;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsHeader(
    absl::string_view header_json, uint64_t data_size, const std::string& file,
    std::map<std::string, std::string>* metadata) {
  nlohmann::json header = nlohmann::json::parse(header_json.begin(), header_json.end(), nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded()) return CorruptHeader(file, "", "header is not valid JSON");
  if (!header.is_object()) return CorruptHeader(file, "", "header is not a JSON object");

  std::vector<TensorInfo> tensors;
  tensors.reserve(header.size());
  const std::string duplicate = FindDuplicateTensorName(header_json);
  if (!duplicate.empty()) return CorruptHeader(file, duplicate, "duplicate tensor name");

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      RETURN_IF_ERROR(ReadHeaderMetadata(it.value(), file, metadata));
      continue;
    }
    ASSIGN_OR_RETURN(TensorInfo info, ParseTensorEntry(it.key(), it.value(), data_size, file));
    tensors.push_back(std::move(info));
  }
  RETURN_IF_ERROR(CheckNoOverlap(tensors, file));
  return tensors;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  // From here on the file object owns fd (closed in the destructor on every error path).
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    return absl::DataLossError(
        absl::StrCat(path, ": corrupt safetensors file: ", file_size, " bytes, shorter than the "
                     "8-byte header length"));
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
  }
  file->map_ = map;
  file->map_size_ = file_size;
  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes || n > file_size - 8) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt safetensors file: header length ", n,
                                            " exceeds the file size ", file_size, " (or the ",
                                            kMaxHeaderBytes, "-byte limit)"));
  }
  file->data_file_offset_ = 8 + n;
  file->data_ = bytes + 8 + n;
  file->data_size_ = file_size - 8 - n;
  absl::string_view header(reinterpret_cast<const char*>(bytes + 8), n);
  auto tensors = ParseSafetensorsHeader(header, file->data_size_, path, &file->metadata_);
  if (!tensors.ok()) return tensors.status();
  file->tensors_ = std::move(*tensors);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_[file->tensors_[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

absl::Status SafetensorsFile::ReadTensorBytes(const TensorInfo& info, uint64_t offset,
                                              uint64_t length, void* dst) const {
  if (offset > info.nbytes() || length > info.nbytes() - offset || info.end > data_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor '", info.name, "': read of ", length, " bytes at offset ",
                     offset, " leaves the tensor (", info.nbytes(), " bytes)"));
  }
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t pos = data_file_offset_ + info.begin + offset;
  while (length > 0) {
    // pread transfers at most ~2 GiB per call on Linux; ask for less and loop.
    const size_t want = static_cast<size_t>(std::min<uint64_t>(length, 1ull << 30));
    ssize_t got = ::pread(fd_, out, want, static_cast<off_t>(pos));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(path_, ": tensor '", info.name,
                                              "': read failed: ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(
          path_, ": tensor '", info.name, "': file ends at byte ", pos,
          ", before the tensor's data (it was truncated after it was opened)"));
    }
    out += got;
    pos += static_cast<uint64_t>(got);
    length -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<const TensorInfo*> SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  return &tensors_[it->second];
}

}  // namespace ditserve::sharding
