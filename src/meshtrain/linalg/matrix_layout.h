// Where each element of a distributed matrix lives: 2D block-cyclic over a
// p x q process grid (ScaLAPACK's layout, source process (0, 0)). Block
// (I, J) of mb x nb elements sits on grid row I mod p, column J mod q; each
// rank stores its blocks in order as one row-major local matrix. The block
// layout is the case mb = ceil(rows / p), nb = ceil(cols / q): one block per
// rank, the last ones shorter (or empty).
#pragma once
#include <cstdint>
#include <string>

namespace meshtrain::linalg {

struct MatrixLayout {
  int64_t rows = 0, cols = 0;
  int64_t mb = 1, nb = 1;  // block rows, block columns
  int p = 1, q = 1;        // process grid: rows, columns

  static MatrixLayout block(int64_t rows, int64_t cols, int p, int q);
  static MatrixLayout block_cyclic(int64_t rows, int64_t cols, int64_t mb, int64_t nb, int p,
                                   int q);

  // Rows (columns) stored by grid row `prow` (grid column `pcol`).
  int64_t local_rows(int prow) const;
  int64_t local_cols(int pcol) const;
  int owner_row(int64_t i) const { return static_cast<int>((i / mb) % p); }
  int owner_col(int64_t j) const { return static_cast<int>((j / nb) % q); }
  // Position of global row i (column j) in its owner's local matrix.
  int64_t local_row(int64_t i) const { return (i / (mb * p)) * mb + i % mb; }
  int64_t local_col(int64_t j) const { return (j / (nb * q)) * nb + j % nb; }
  // The global row of grid row prow's local row li (inverse of local_row).
  int64_t global_row(int prow, int64_t li) const { return ((li / mb) * p + prow) * mb + li % mb; }
  int64_t global_col(int pcol, int64_t lj) const { return ((lj / nb) * q + pcol) * nb + lj % nb; }
  // Grid position of a world rank (row-major); false when the rank is past
  // the grid's p * q ranks (it stores nothing).
  bool coords(int rank, int& prow, int& pcol) const;
  bool is_block() const;  // one block per grid row and column
  bool operator==(const MatrixLayout&) const = default;
  std::string str() const;  // "4096x4096 in 256x256 blocks on 2x2"
};

// Elements of `n` in `nb`-blocks dealt cyclically to `parts`, held by `index`
// (ScaLAPACK's numroc).
int64_t cyclic_count(int64_t n, int64_t nb, int index, int parts);

}  // namespace meshtrain::linalg
