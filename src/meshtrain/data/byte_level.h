// The byte-level alphabet of GPT-2 style BPE (`ByteLevel` in tokenizer.json):
// each byte 0..255 stands for one printable code point, so vocabulary entries
// are text. Printable Latin-1 bytes map to themselves; the others (controls,
// space, 0x7F..0xA0, 0xAD) to U+0100 onward, in byte order.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain::data {

// The code point that stands for `byte`.
uint32_t byte_level_char(uint8_t byte);
// The byte a code point stands for, or -1 when it is outside the alphabet.
int byte_level_byte(uint32_t cp);

// A vocabulary entry (UTF-8 of byte-level characters) back to its bytes.
// Returns false, leaving `out` unspecified, when a character is outside the
// alphabet (Hugging Face then takes the entry's own UTF-8 bytes).
bool byte_level_to_bytes(std::string_view entry, std::string& out);
// Bytes to their byte-level spelling.
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace meshtrain::data
