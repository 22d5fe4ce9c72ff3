#include "meshtrain/linalg/matrix_layout.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"

namespace meshtrain::linalg {

int64_t cyclic_count(int64_t n, int64_t nb, int index, int parts) {
  const int64_t blocks = n / nb;  // whole blocks
  int64_t count = (blocks / parts) * nb;
  const int64_t extra = blocks % parts;
  if (index < extra) count += nb;
  else if (index == extra) count += n % nb;
  return count;
}

MatrixLayout MatrixLayout::block_cyclic(int64_t rows, int64_t cols, int64_t mb, int64_t nb, int p,
                                        int q) {
  MT_CHECK(rows >= 0 && cols >= 0, "matrix layout: negative shape {}x{}", rows, cols);
  MT_CHECK(p >= 1 && q >= 1, "matrix layout: process grid {}x{} must be at least 1x1", p, q);
  MT_CHECK(mb >= 1 && nb >= 1, "matrix layout: block {}x{} must be at least 1x1", mb, nb);
  return {rows, cols, mb, nb, p, q};
}

MatrixLayout MatrixLayout::block(int64_t rows, int64_t cols, int p, int q) {
  MT_CHECK(p >= 1 && q >= 1, "matrix layout: process grid {}x{} must be at least 1x1", p, q);
  const int64_t mb = std::max<int64_t>(1, (rows + p - 1) / p);
  const int64_t nb = std::max<int64_t>(1, (cols + q - 1) / q);
  return block_cyclic(rows, cols, mb, nb, p, q);
}

int64_t MatrixLayout::local_rows(int prow) const { return cyclic_count(rows, mb, prow, p); }
int64_t MatrixLayout::local_cols(int pcol) const { return cyclic_count(cols, nb, pcol, q); }

bool MatrixLayout::coords(int rank, int& prow, int& pcol) const {
  if (rank < 0 || rank >= p * q) return false;
  prow = rank / q;
  pcol = rank % q;
  return true;
}

// A single grid row (column) holds every row (column) in order whatever the
// block size, so it counts as one block.
bool MatrixLayout::is_block() const {
  return (p == 1 || mb * p >= rows) && (q == 1 || nb * q >= cols);
}

std::string MatrixLayout::str() const {
  return fmt::format("{}x{} in {}x{} blocks on {}x{}", rows, cols, mb, nb, p, q);
}

}  // namespace meshtrain::linalg
