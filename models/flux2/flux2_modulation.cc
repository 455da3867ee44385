#include "models/flux2/flux2_modulation.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ditserve::models::flux2 {

absl::StatusOr<Flux2Modulation> Flux2Modulation::Load(const ModuleLoader& loader,
                                                      const std::string& prefix, int64_t dim,
                                                      int sets) {
  const std::string path = JoinPath(prefix, "linear");
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> linear, loader.LoadLinear(path));
  if (!sharding::IsFullInFullOut(linear->style())) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is planned ", sharding::TpStyleName(linear->style()),
                     "; the shared modulation needs the full output on every rank (replicate it "
                     "or plan it rowwise_split_input)"));
  }
  if (linear->in_features() != dim || linear->out_features() != 3 * sets * dim) {
    return absl::InvalidArgumentError(absl::StrCat(path, " maps ", linear->in_features(), " → ",
                                                   linear->out_features(), " features, expected ",
                                                   dim, " → ", 3 * sets * dim));
  }
  return Flux2Modulation(std::move(linear), sets);
}

std::vector<ModulationSet> Flux2Modulation::Forward(const torch::Tensor& temb) const {
  auto chunks = ModulationOutput(source_, *linear_, temb).chunk(3 * sets_, /*dim=*/-1);
  std::vector<ModulationSet> out;
  for (int i = 0; i < sets_; ++i) {
    out.push_back(ModulationSet{chunks[3 * i], chunks[3 * i + 1], chunks[3 * i + 2]});
  }
  return out;
}

}  // namespace ditserve::models::flux2
