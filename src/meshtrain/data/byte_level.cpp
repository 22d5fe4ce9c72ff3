#include "meshtrain/data/byte_level.h"

#include <array>

#include "meshtrain/data/utf8.h"

namespace meshtrain::data {

namespace {
struct Alphabet {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // every byte-level code point is below 0x144

  Alphabet() {
    to_byte.fill(-1);
    const auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[static_cast<size_t>(b)] = printable(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}
}  // namespace

uint32_t byte_level_char(uint8_t byte) { return alphabet().to_char[byte]; }

int byte_level_byte(uint32_t cp) {
  return cp < alphabet().to_byte.size() ? alphabet().to_byte[cp] : -1;
}

bool byte_level_to_bytes(std::string_view entry, std::string& out) {
  out.clear();
  size_t i = 0;
  while (i < entry.size()) {
    uint32_t cp = 0;
    const int n = utf8_sequence(entry, i, &cp);
    if (n == 0) return false;
    const int b = byte_level_byte(cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (char c : bytes) append_utf8(out, byte_level_char(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace meshtrain::data
