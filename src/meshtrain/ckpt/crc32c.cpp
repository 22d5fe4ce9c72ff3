#include "meshtrain/ckpt/crc32c.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/launch/heartbeat.h"

namespace meshtrain::ckpt {

uint32_t crc32c_file(const std::string& path, uint64_t* bytes_read) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(fd >= 0, "cannot open {} to verify its checksum: {}", path, std::strerror(errno));
  std::vector<unsigned char> buf(4u << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      fail("cannot read {} to verify its checksum: {}", path, std::strerror(err));
    }
    if (n == 0) break;
    crc = crc32c(buf.data(), static_cast<size_t>(n), crc);
    total += static_cast<uint64_t>(n);
    launch::heartbeat_pulse();  // verifying a large checkpoint is progress
  }
  ::close(fd);
  if (bytes_read) *bytes_read = total;
  return crc;
}

std::string crc_hex(uint32_t crc) { return fmt::format("0x{:08x}", crc); }

uint32_t parse_crc_hex(const std::string& s) {
  MT_CHECK(s.size() == 10 && s[0] == '0' && s[1] == 'x', "'{}' is not a CRC32C like 0x1234abcd", s);
  return static_cast<uint32_t>(std::stoul(s.substr(2), nullptr, 16));
}

}  // namespace meshtrain::ckpt
