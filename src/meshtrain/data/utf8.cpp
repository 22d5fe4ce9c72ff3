#include "meshtrain/data/utf8.h"

namespace meshtrain::data {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
// How many bytes of s[i..] form a valid prefix of a UTF-8 sequence (Unicode
// Table 3-7), and the full length that lead byte needs (0 for an invalid lead).
struct Prefix {
  int valid = 0;
  int need = 0;
};

Prefix utf8_prefix(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = at(i);
  if (b0 < 0x80) return {1, 1};
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  int valid = 1;
  for (int k = 1; k < need; ++k) {
    if (i + k >= s.size()) break;
    const uint8_t b = at(i + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++valid;
  }
  return {valid, need};
}
}  // namespace

int utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const Prefix p = utf8_prefix(s, i);
  if (p.need == 0 || p.valid != p.need) return 0;
  if (cp) {
    const auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[k])); };
    switch (p.need) {
      case 1: *cp = at(i); break;
      case 2: *cp = ((at(i) & 0x1F) << 6) | (at(i + 1) & 0x3F); break;
      case 3: *cp = ((at(i) & 0x0F) << 12) | ((at(i + 1) & 0x3F) << 6) | (at(i + 2) & 0x3F); break;
      default:
        *cp = ((at(i) & 0x07) << 18) | ((at(i + 1) & 0x3F) << 12) | ((at(i + 2) & 0x3F) << 6) |
              (at(i + 3) & 0x3F);
    }
  }
  return p.need;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Prefix p = utf8_prefix(bytes, i);
    if (p.need != 0 && p.valid == p.need) {
      out.append(bytes.substr(i, static_cast<size_t>(p.need)));
      i += static_cast<size_t>(p.need);
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD for the maximal invalid subpart
      i += static_cast<size_t>(p.valid > 0 ? p.valid : 1);
    }
  }
  return out;
}

}  // namespace meshtrain::data
