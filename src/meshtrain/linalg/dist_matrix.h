// A matrix distributed over a process grid in a MatrixLayout: each rank holds
// its local row-major part (leading dimension = its local column count).
// f64, f32 and bf16 elements (a bf16 product's result is f32: local_gemm.h).
#pragma once
#include <functional>
#include <vector>

#include "meshtrain/core/dtype.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/linalg/matrix_layout.h"
#include "meshtrain/linalg/process_grid.h"

namespace meshtrain::linalg {

class DistMatrix {
 public:
  DistMatrix() = default;
  // This rank's zeroed local part of a matrix in `layout` (nothing when the
  // rank is past the layout's p * q ranks).
  DistMatrix(const MatrixLayout& layout, DType dtype, int world_rank, Device device = Device::cpu());

  const MatrixLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  bool on_grid() const { return on_grid_; }
  int prow() const { return prow_; }
  int pcol() const { return pcol_; }
  int64_t local_rows() const { return lrows_; }
  int64_t local_cols() const { return lcols_; }
  int64_t ld() const { return lcols_; }
  void* local() const { return data_.defined() ? data_.raw() : nullptr; }
  template <typename T> T* local_as() const { return static_cast<T*>(local()); }
  size_t local_bytes() const { return static_cast<size_t>(lrows_ * lcols_) * dtype_size(dtype_); }

  // Host-memory element access through double (tests, checks, fills).
  double get_local(int64_t li, int64_t lj) const;
  void set_local(int64_t li, int64_t lj, double v);
  // Sets every local element from its global position: value(i, j).
  void fill(const std::function<double(int64_t, int64_t)>& value);
  // The whole matrix, row-major, on every rank (collective; small matrices).
  std::vector<double> gather(Context& ctx) const;

 private:
  MatrixLayout layout_;
  DType dtype_ = DType::F32;
  bool on_grid_ = false;
  int prow_ = 0, pcol_ = 0;
  int64_t lrows_ = 0, lcols_ = 0;
  Tensor data_;
};

// `a` moved into layout `to` (any grid shape and block sizes up to the
// world's size): element (i, j) of the result is a(i, j), or a(j, i) when
// `transpose`. Collective on the world: one all-to-all.
DistMatrix redistribute(Context& ctx, const DistMatrix& a, const MatrixLayout& to,
                        bool transpose = false);

// The dtypes a distributed multiply accepts for A and B.
void check_gemm_dtype(DType t);

}  // namespace meshtrain::linalg
