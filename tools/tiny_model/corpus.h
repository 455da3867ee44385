// The English text the tiny model's tokenizers are trained on (CLIP BPE merges, T5 SentencePiece
// unigram), generated deterministically from embedded word lists and sentence templates so that
// prompts like "a photo of a cat" tokenise into real sub-words rather than single letters.
// Torch-free.
//
// Thread-safety: the text is built once (function-local static) and immutable afterwards.
#pragma once

#include <string>

namespace ditserve::tiny_model {

// One sentence per line, lower and upper case letters, digits and ASCII punctuation; about 150 KB.
// The same bytes on every platform and every run.
const std::string& EmbeddedCorpus();

}  // namespace ditserve::tiny_model
