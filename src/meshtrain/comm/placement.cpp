#include "meshtrain/comm/placement.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace meshtrain::comm {

void gather_placement(Transport& t, Placement& p, const OpContext& ctx) {
  int32_t mine[2] = {p.node_id, p.host_id};
  std::vector<int32_t> all(2 * static_cast<size_t>(t.size()));
  t.allgather_small(mine, sizeof(mine), all.data(), ctx);
  std::vector<int32_t> nodes;
  p.single_host = true;
  for (int r = 0; r < t.size(); ++r) {
    nodes.push_back(all[2 * r]);
    p.single_host &= all[2 * r + 1] == all[1];
  }
  std::sort(nodes.begin(), nodes.end());
  p.num_nodes = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

}  // namespace meshtrain::comm
