// The GPT-2 / CLIP byte-to-character table: byte-level BPE works on strings in which every byte of
// the UTF-8 input is one visible character. Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
// themselves (as code points); the other 68 bytes map, in byte order, to U+0100, U+0101, ...
// Torch-free; the table is built once and immutable, so any thread may use it.
#pragma once

#include <array>
#include <string>

#include "absl/strings/string_view.h"

namespace ditserve::tokenizers {

// UTF-8 encoding of the character that stands for each byte value.
const std::array<std::string, 256>& ByteToUnicodeTable();

// Appends the byte-level characters of `text` to `out`.
void AppendByteLevel(absl::string_view text, std::string* out);

}  // namespace ditserve::tokenizers
