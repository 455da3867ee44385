#include "tools/tiny_model/t5_spiece.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "models/tokenizers/spm_model_proto.h"
#include "tools/tiny_model/file_util.h"

namespace ditserve::tiny_model {
namespace {

namespace fs = std::filesystem;

constexpr char kTrainerName[] = "ditserve-spm-train";

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

absl::StatusOr<std::string> FindSpmTrainer() {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("DITSERVE_SPM_TRAIN"); env != nullptr && *env != '\0') {
    if (IsExecutableFile(env)) return std::string(env);
    tried.push_back(absl::StrCat("$DITSERVE_SPM_TRAIN=", env));
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::string beside = (self.parent_path() / kTrainerName).string();
    if (IsExecutableFile(beside)) return beside;
    tried.push_back(beside);
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      const std::string candidate = JoinPath(std::string(dir), kTrainerName);
      if (IsExecutableFile(candidate)) return candidate;
    }
    tried.push_back("$PATH");
  }
  return absl::NotFoundError(absl::StrCat(
      kTrainerName, " (the SentencePiece trainer helper built with ditserve-tool) was not found; "
      "looked at: ", absl::StrJoin(tried, ", ")));
}

absl::StatusOr<int64_t> TrainT5SentencePiece(const std::string& corpus, int64_t vocab_size,
                                             const std::string& trainer,
                                             const std::string& out_dir) {
  if (vocab_size < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("T5 SentencePiece vocab_size must be >= 4, got ", vocab_size));
  }
  std::string trainer_path = trainer;
  if (trainer_path.empty()) {
    ASSIGN_OR_RETURN(trainer_path, FindSpmTrainer());
  }
  const std::string work = JoinPath(out_dir, ".spm-train");
  RETURN_IF_ERROR(RemoveTree(work));
  std::error_code ec;
  if (!fs::create_directory(work, ec) || ec) {
    return absl::InternalError(absl::StrCat(work, ": cannot create: ", ec.message()));
  }
  struct Cleanup {
    std::string dir;
    ~Cleanup() { RemoveTree(dir).IgnoreError(); }
  } cleanup{work};

  RETURN_IF_ERROR(WriteFile(JoinPath(work, "corpus.txt"), corpus));
  // Relative paths: the trainer records them in the model, which must not depend on where it ran.
  // hard_vocab_limit=false: a corpus with too few distinct pieces gives fewer, not an error.
  const std::string options = absl::StrCat(
      "--input=corpus.txt --model_prefix=spiece --model_type=unigram --vocab_size=", vocab_size,
      " --character_coverage=1.0 --normalization_rule_name=nmt_nfkc"
      " --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1"
      " --pad_piece=<pad> --eos_piece=</s> --unk_piece=<unk>"
      " --num_threads=1 --shuffle_input_sentence=false --input_sentence_size=0"
      " --hard_vocab_limit=false --minloglevel=1");
  const std::string log_path = JoinPath(work, "train.log");
  SpawnOptions trainer_run({trainer_path, options});
  trainer_run.cwd = work;
  trainer_run.stdout_to = Redirect::File(log_path);
  trainer_run.stderr_to = Redirect::ToStdout();
  ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(trainer_run));
  const ExitStatus exit = child.Wait();
  if (!exit.success()) {
    auto log = ReadTextFile(log_path);
    return absl::InternalError(
        absl::StrCat(trainer_path, " failed (", exit.ToString(), "): ", log.ok() ? *log : ""));
  }
  ASSIGN_OR_RETURN(const std::string model_bytes, ReadTextFile(JoinPath(work, "spiece.model")));
  ASSIGN_OR_RETURN(const tokenizers::SpmModelProto model,
                   tokenizers::ParseSpmModelProto(model_bytes, "spiece.model"));
  RETURN_IF_ERROR(WriteFile(JoinPath(out_dir, "spiece.model"), model_bytes));
  return static_cast<int64_t>(model.pieces.size());
}

std::string T5TokenizerConfigJson(int64_t extra_ids, int model_max_length) {
  nlohmann::json specials = nlohmann::json::array({"<pad>", "</s>"});
  for (int64_t i = 0; i < extra_ids; ++i) specials.push_back(absl::StrCat("<extra_id_", i, ">"));
  nlohmann::json config = {
      {"backend", "tokenizers"},
      {"eos_token", "</s>"},
      {"extra_ids", extra_ids},
      {"extra_special_tokens", specials},
      {"is_local", true},
      {"local_files_only", false},
      {"model_max_length", model_max_length},
      {"pad_token", "<pad>"},
      {"tokenizer_class", "T5Tokenizer"},
      {"unk_id", 2},
      {"unk_token", "<unk>"},
  };
  return ConfigJsonText(config);
}

}  // namespace ditserve::tiny_model
