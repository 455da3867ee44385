// The tiny model's CLIP tokenizer files (`tokenizer/`): a byte-level BPE vocabulary learned from
// the embedded corpus (corpus.h), laid out as OpenAI's CLIP vocabulary is. Torch-free.
//
// Training: each corpus line is lower-cased and split like CLIP's pre-tokenizer (contractions,
// letter runs, single digits, runs of other non-space characters); every word becomes its
// byte-level characters (models/tokenizers/byte_level.h) with "</w>" appended to the last one.
// Then, `num_merges` times, the adjacent pair with the highest corpus count is merged everywhere
// (ties: the pair whose "left right" text sorts first), stopping early when no pair occurs twice.
//
// Vocabulary order (vocab.json ids): the 256 byte characters in GPT-2's table order (printable
// bytes first), the same 256 with "</w>", one entry per merge in merge order, then
// <|startoftext|> and <|endoftext|> (so <|endoftext|> has the highest id, as CLIP's pooling by
// argmax(input_ids) requires).
//
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ditserve::tiny_model {

struct ClipBpeFiles {
  std::vector<std::string> vocab;                            // token text, index = id
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  // vocab.json: {"token": id, ...} in id order, separators ", " and ": ", no trailing newline.
  std::string VocabJson() const;
  // merges.txt: "#version: 0.2" then one "left right" per line, each line ending in '\n'.
  std::string MergesText() const;
};

inline constexpr char kClipBosToken[] = "<|startoftext|>";
inline constexpr char kClipEosToken[] = "<|endoftext|>";

// Learns at most `num_merges` merges from `corpus` (one sentence per line). INVALID_ARGUMENT if
// num_merges < 0.
absl::StatusOr<ClipBpeFiles> TrainClipBpe(const std::string& corpus, int num_merges);

// Writes vocab.json, merges.txt and tokenizer_config.json into the existing folder `dir`.
absl::Status WriteClipTokenizer(const std::string& dir, const ClipBpeFiles& files,
                                int model_max_length);

}  // namespace ditserve::tiny_model
