// The tiny model's T5 tokenizer files (`tokenizer_2/`): a SentencePiece unigram model trained on
// the embedded corpus by libsentencepiece's own trainer, with T5's special pieces (<pad> = 0,
// </s> = 1, <unk> = 2, no <s>) and normaliser (nmt_nfkc, as T5's spiece.model), plus
// tokenizer_config.json with T5's <extra_id_N> tokens. Torch-free.
//
// The trainer runs in a child process, the `ditserve-spm-train` helper (spm_train_main.cc): the
// library cannot be loaded into a process that also loads libprotobuf. It is found, in order, at
// $DITSERVE_SPM_TRAIN, next to the running executable, then on $PATH. Training is deterministic
// (one thread, no sampling or shuffling; the corpus and model paths recorded in the model are
// relative), so the same corpus always gives the same spiece.model bytes.
//
// Thread-safety: the functions may be called from any thread; concurrent calls must use different
// output folders (the trainer is started with common/subprocess.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ditserve::tiny_model {

// Full path of an executable ditserve-spm-train, or NOT_FOUND saying where it was looked for.
absl::StatusOr<std::string> FindSpmTrainer();

// Trains on `corpus` (one sentence per line) for `vocab_size` pieces (at most: a corpus too small
// for that many yields fewer) and writes `out_dir`/spiece.model. Returns the number of pieces.
// `trainer` is the helper's path ("" = FindSpmTrainer()). INTERNAL when it cannot be started, or
// with the trainer's log when it fails.
absl::StatusOr<int64_t> TrainT5SentencePiece(const std::string& corpus, int64_t vocab_size,
                                             const std::string& trainer,
                                             const std::string& out_dir);

// tokenizer_config.json as transformers 5 writes it for T5Tokenizer (the fixture's keys).
std::string T5TokenizerConfigJson(int64_t extra_ids, int model_max_length);

}  // namespace ditserve::tiny_model
