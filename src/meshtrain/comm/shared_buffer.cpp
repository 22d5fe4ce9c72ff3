#include "meshtrain/comm/shared_buffer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::comm {

SharedMapping::~SharedMapping() = default;

namespace {
struct PrivateMapping final : SharedMapping {
  ~PrivateMapping() override { std::free(local); }
};
}  // namespace

std::shared_ptr<SharedMapping> private_mapping(size_t bytes) {
  const size_t page = static_cast<size_t>(std::max(4096L, sysconf(_SC_PAGESIZE)));
  const size_t mapped = std::max(page, (bytes + page - 1) / page * page);
  auto m = std::make_shared<PrivateMapping>();
  m->bytes = bytes;
  m->local = std::aligned_alloc(page, mapped);
  MT_CHECK(m->local, "out of memory allocating {} bytes", bytes);
  std::memset(m->local, 0, mapped);
  return m;
}

void* SharedBuffer::data() const { return m_ ? m_->local : nullptr; }
size_t SharedBuffer::bytes() const { return m_ ? m_->bytes : 0; }
void* SharedBuffer::peer(int r) const {
  if (!m_ || r < 0 || static_cast<size_t>(r) >= m_->peers.size()) return nullptr;
  return m_->peers[static_cast<size_t>(r)];
}

}  // namespace meshtrain::comm
