// CRC32C (Castagnoli): the checksum of checkpoint files and of TensorBoard
// records. Detects every single flipped byte and every burst up to 32 bits,
// and runs at memory speed with the SSE4.2 crc32 instruction (a table
// fallback elsewhere).
#pragma once
#include <cstddef>
#include <cstdint>

namespace meshtrain {

// Extends `crc` (0 for a fresh checksum) over `bytes` bytes at `data`:
// crc32c(b, crc32c(a)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace meshtrain
