#include "tools/dtype_flag.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_flags.h"

namespace ditserve::tools {
namespace {

// The long names of the serving dtypes are common/model_flags.h's (the frontend's --dtype).
struct Spelling {
  sharding::DType dtype;
  const char* name;
  const char* short_name;
};
const Spelling kSpellings[] = {{sharding::DType::kF32, ModelDtypeName(ModelDtype::kFloat32), "f32"},
                               {sharding::DType::kBF16, ModelDtypeName(ModelDtype::kBFloat16), "bf16"},
                               {sharding::DType::kF16, "float16", "f16"}};

}  // namespace

absl::StatusOr<sharding::DType> ParseDTypeFlag(const std::string& value,
                                               std::initializer_list<sharding::DType> allowed) {
  std::vector<const char*> names;
  for (sharding::DType dtype : allowed) {
    for (const Spelling& s : kSpellings) {
      if (s.dtype != dtype) continue;
      if (value == s.name || value == s.short_name) return dtype;
      names.push_back(s.name);
    }
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    list += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
    list += names[i];
  }
  return absl::InvalidArgumentError(absl::StrCat("--dtype must be ", list, ", got '", value, "'"));
}

}  // namespace ditserve::tools
