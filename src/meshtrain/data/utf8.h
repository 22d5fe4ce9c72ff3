// UTF-8 helpers for tokenizers: decoding one code point, encoding one, and the
// lossy conversion tokenizers apply when decoded bytes are not valid UTF-8.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace meshtrain::data {

// Appends code point `cp` (<= 0x10FFFF) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// The length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when
// the bytes there are not one (a stray continuation byte, an overlong or
// surrogate form, a truncated sequence). Decodes it into *cp when valid.
int utf8_sequence(std::string_view s, size_t i, uint32_t* cp);

// `bytes` with each maximal invalid subpart replaced by U+FFFD, the Unicode
// recommended practice that Rust's String::from_utf8_lossy and Python's
// errors="replace" follow (so decoding equals the Hugging Face library's).
std::string utf8_lossy(std::string_view bytes);

}  // namespace meshtrain::data
