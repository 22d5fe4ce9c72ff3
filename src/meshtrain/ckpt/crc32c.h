// CRC32C (Castagnoli), the checksum of checkpoint files: detects every
// single flipped byte and every burst up to 32 bits, and runs at memory speed
// with the SSE4.2 crc32 instruction (a table fallback elsewhere).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace meshtrain::ckpt {

// Extends `crc` (0 for a fresh checksum) over `bytes` bytes at `data`:
// crc32c(b, crc32c(a)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

// The CRC32C of a whole file, read in large blocks. Throws naming the file.
uint32_t crc32c_file(const std::string& path, uint64_t* bytes_read = nullptr);

// "0x1234abcd" and back (the index stores checksums as hex strings).
std::string crc_hex(uint32_t crc);
uint32_t parse_crc_hex(const std::string& s);

}  // namespace meshtrain::ckpt
