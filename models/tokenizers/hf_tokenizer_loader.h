// LoadHfTokenizer(dir): the HfTokenizer of a Hugging Face tokenizer folder, whichever format it
// ships. Torch-free.
//
//   - `dir`/tokenizer.json present: read it (hf_tokenizer_json.h);
//   - otherwise vocab.json + merges.txt: the slow Qwen2 format (qwen2_slow_tokenizer.h; the only
//     slow format supported, since its pre-tokenizer pattern is not in the files);
//   - neither: NOT_FOUND naming the folder.
// Then, as transformers does when it loads the folder, tokenizer_config.json (optional) adds to
// the added vocabulary: for tokenizer.json, its added_tokens_decoder entries (id order; ids by the
// tokenizers rule, flags from the config); for both formats, each of bos/eos/unk/pad and the
// additional special tokens that is not an added token yet (special, not normalised). Values in
// special_tokens_map.json, when that file exists, take precedence over tokenizer_config.json's, as
// in transformers. For the slow Qwen2 format, keys absent from both files take Qwen2Tokenizer's
// defaults (unk, eos and pad "<|endoftext|>"). The special tokens' ids and model_max_length are
// kept in the tokenizer (HfTokenizer::pad_id() etc.).
//
// Errors name the file and field. Stateless; safe to call from any thread.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "models/tokenizers/hf_tokenizer.h"
#include "models/tokenizers/tokenizer_files.h"

namespace ditserve::tokenizers {

absl::StatusOr<HfTokenizer> LoadHfTokenizer(const std::string& dir);
// The same over `folder`'s files (TokenizerFolder::OnDisk(dir) is the above; InMemory: the fuzz
// target, tests). Messages name folder.Path(file).
absl::StatusOr<HfTokenizer> LoadHfTokenizer(const TokenizerFolder& folder);

}  // namespace ditserve::tokenizers
