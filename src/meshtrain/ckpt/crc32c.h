// Checkpoint checksums: CRC32C (core/crc32c.h) of whole files, and the hex
// form the index stores.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "meshtrain/core/crc32c.h"

namespace meshtrain::ckpt {

using meshtrain::crc32c;  // core/crc32c.h

// The CRC32C of a whole file, read in large blocks. Throws naming the file.
uint32_t crc32c_file(const std::string& path, uint64_t* bytes_read = nullptr);

// "0x1234abcd" and back (the index stores checksums as hex strings).
std::string crc_hex(uint32_t crc);
uint32_t parse_crc_hex(const std::string& s);

}  // namespace meshtrain::ckpt
