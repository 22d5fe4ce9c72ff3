// What a transport does when it has nothing special to offer.
#include "meshtrain/comm/transport.h"

#include "meshtrain/comm/shared_buffer.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {

void Transport::run_native(const CollArgs&, const OpContext& ctx) {
  fail("{}: the {} transport has no native collectives", ctx.what(), kind());
}

// Transports whose peers cannot map this memory hand out private memory.
std::shared_ptr<SharedMapping> Transport::alloc_shared(size_t bytes, const OpContext&) {
  return private_mapping(bytes);
}

}  // namespace meshtrain::comm
