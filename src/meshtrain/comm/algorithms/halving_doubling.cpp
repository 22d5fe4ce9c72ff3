// Recursive halving-doubling allreduce (Rabenseifner): a reduce-scatter that
// halves the exchanged range each round, then an allgather that doubles it:
// 2 log2(p) steps and 2S bytes per rank. For n not a power of two, the first
// 2*(n-p) ranks pair up and fold (odd ranks take their even neighbour's data),
// the p survivors run the power-of-two algorithm, and the result is unfolded.
#include <cstring>

#include "meshtrain/comm/algorithms/algorithm.h"

namespace meshtrain::comm {

void run_halving_doubling(AlgoEnv& env, const CollArgs& a) {
  MT_CHECK(a.op == CollOp::Allreduce, "algorithm 'halving_doubling' cannot run {}",
           coll_op_name(a.op));
  Transport& t = env.transport;
  const int n = t.size(), r = t.rank();
  const size_t esz = dtype_size(a.dtype);
  char* buf = static_cast<char*>(a.recv);
  if (a.send != a.recv && a.bytes()) std::memcpy(buf, a.send, a.bytes());
  if (n == 1 || a.count == 0) return;

  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;

  // Fold: even ranks below 2*rem hand their data to the odd neighbour and sit out.
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      t.send(r + 1, buf, a.bytes(), env.ctx);
      vr = -1;
    } else {
      RecvSpec rs{r - 1, buf, a.bytes(), true, a.dtype, a.redop};
      t.exchange({}, {&rs, 1}, env.ctx);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  // Byte range covered by blocks [lo, hi) of the p2-way split.
  auto range = [&](int lo, int hi) {
    Block b0 = block_of(a.count, p2, lo);
    Block b1 = block_of(a.count, p2, hi - 1);
    return std::pair<size_t, size_t>{b0.offset * esz, (b1.offset + b1.count - b0.offset) * esz};
  };

  if (vr >= 0) {
    int lo = 0, hi = p2;
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {  // recursive halving
      int partner = real(vr ^ mask), mid = (lo + hi) / 2;
      bool keep_low = (vr & mask) == 0;
      auto [koff, klen] = keep_low ? range(lo, mid) : range(mid, hi);
      auto [goff, glen] = keep_low ? range(mid, hi) : range(lo, mid);
      SendSpec s{partner, buf + goff, glen};
      RecvSpec rs{partner, buf + koff, klen, true, a.dtype, a.redop};
      t.exchange({&s, 1}, {&rs, 1}, env.ctx);
      if (keep_low) hi = mid; else lo = mid;
    }
    for (int mask = 1; mask < p2; mask *= 2) {  // recursive doubling
      int partner_v = vr ^ mask;
      int my_lo = vr & ~(mask - 1), their_lo = partner_v & ~(mask - 1);
      auto [moff, mlen] = range(my_lo, my_lo + mask);
      auto [toff, tlen] = range(their_lo, their_lo + mask);
      SendSpec s{real(partner_v), buf + moff, mlen};
      RecvSpec rs{real(partner_v), buf + toff, tlen};
      t.exchange({&s, 1}, {&rs, 1}, env.ctx);
    }
  }
  // Unfold: the folded-in even ranks get the result back.
  if (r < 2 * rem) {
    if (r % 2 == 1)
      t.send(r - 1, buf, a.bytes(), env.ctx);
    else
      t.recv(r + 1, buf, a.bytes(), env.ctx);
  }
}

}  // namespace meshtrain::comm
