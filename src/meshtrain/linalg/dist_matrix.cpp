#include "meshtrain/linalg/dist_matrix.h"

#include <algorithm>
#include <cstring>

#include "meshtrain/core/error.h"
#include "meshtrain/core/half.h"

namespace meshtrain::linalg {

void check_gemm_dtype(DType t) {
  MT_CHECK(t == DType::F64 || t == DType::F32 || t == DType::BF16,
           "distributed matrix: dtype {} is not supported (f64, f32, bf16)", dtype_name(t));
}

DistMatrix::DistMatrix(const MatrixLayout& layout, DType dtype, int world_rank, Device device)
    : layout_(layout), dtype_(dtype) {
  check_gemm_dtype(dtype);
  on_grid_ = layout.coords(world_rank, prow_, pcol_);
  if (!on_grid_) return;
  lrows_ = layout.local_rows(prow_);
  lcols_ = layout.local_cols(pcol_);
  data_ = Tensor::zeros({std::max<int64_t>(1, lrows_ * lcols_)}, dtype, MemCategory::Other, device);
}

double DistMatrix::get_local(int64_t li, int64_t lj) const {
  const int64_t at = li * lcols_ + lj;
  switch (dtype_) {
    case DType::F64: return local_as<double>()[at];
    case DType::F32: return local_as<float>()[at];
    case DType::BF16: return bf16_to_f32(local_as<uint16_t>()[at]);
    default: fail("distributed matrix: unsupported dtype");
  }
}

void DistMatrix::set_local(int64_t li, int64_t lj, double v) {
  const int64_t at = li * lcols_ + lj;
  switch (dtype_) {
    case DType::F64: local_as<double>()[at] = v; break;
    case DType::F32: local_as<float>()[at] = static_cast<float>(v); break;
    case DType::BF16: local_as<uint16_t>()[at] = f32_to_bf16(static_cast<float>(v)); break;
    default: fail("distributed matrix: unsupported dtype");
  }
}

void DistMatrix::fill(const std::function<double(int64_t, int64_t)>& value) {
  if (!on_grid_) return;
  MT_CHECK(data_.device().is_cpu(), "distributed matrix fill: the local part is on {}, not the "
           "host", data_.device().str());
  for (int64_t li = 0; li < lrows_; ++li) {
    const int64_t i = layout_.global_row(prow_, li);
    for (int64_t lj = 0; lj < lcols_; ++lj) set_local(li, lj, value(i, layout_.global_col(pcol_, lj)));
  }
}

std::vector<double> DistMatrix::gather(Context& ctx) const {
  // Each rank contributes its elements at their global positions; a sum
  // over ranks assembles the matrix (every element has one owner).
  std::vector<double> all(static_cast<size_t>(layout_.rows * layout_.cols), 0.0);
  if (on_grid_)
    for (int64_t li = 0; li < lrows_; ++li) {
      const int64_t i = layout_.global_row(prow_, li);
      for (int64_t lj = 0; lj < lcols_; ++lj)
        all[static_cast<size_t>(i * layout_.cols + layout_.global_col(pcol_, lj))] = get_local(li, lj);
    }
  if (ctx.size() > 1 && !all.empty())
    ctx.world().allreduce(all.data(), all.size(), DType::F64, comm::ReduceOp::Sum).wait();
  return all;
}

namespace {

// The source element of destination (I, J): (I, J), or (J, I) transposed.
struct Mapping {
  const MatrixLayout& from;
  const MatrixLayout& to;
  bool transpose;
  int source_rank(int64_t i, int64_t j) const {  // i, j in `to`'s coordinates
    const int64_t si = transpose ? j : i, sj = transpose ? i : j;
    return from.owner_row(si) * from.q + from.owner_col(sj);
  }
  int dest_rank(int64_t si, int64_t sj) const {  // si, sj in `from`'s coordinates
    const int64_t i = transpose ? sj : si, j = transpose ? si : sj;
    return to.owner_row(i) * to.q + to.owner_col(j);
  }
};

}  // namespace

DistMatrix redistribute(Context& ctx, const DistMatrix& a, const MatrixLayout& to, bool transpose) {
  const MatrixLayout& from = a.layout();
  const int64_t want_rows = transpose ? from.cols : from.rows;
  const int64_t want_cols = transpose ? from.rows : from.cols;
  MT_CHECK(to.rows == want_rows && to.cols == want_cols, "redistribute: a {}x{} matrix{} cannot "
           "fill a {}x{} layout", from.rows, from.cols, transpose ? " (transposed)" : "", to.rows,
           to.cols);
  MT_CHECK(to.p * to.q <= ctx.size() && from.p * from.q <= ctx.size(),
           "redistribute: the layouts need more ranks than the job's {}", ctx.size());
  DistMatrix out(to, a.dtype(), ctx.rank(), ctx.device());
  const int n = ctx.size();
  const size_t esz = dtype_size(a.dtype());
  const Mapping map{from, to, transpose};
  // Sender order: its local elements row-major, i.e. source (i, j) ascending.
  std::vector<int64_t> send_counts(n, 0);
  if (a.on_grid())
    for (int64_t li = 0; li < a.local_rows(); ++li)
      for (int64_t lj = 0; lj < a.local_cols(); ++lj)
        ++send_counts[map.dest_rank(from.global_row(a.prow(), li), from.global_col(a.pcol(), lj))];
  int64_t most = *std::max_element(send_counts.begin(), send_counts.end());
  if (n > 1) most = ctx.world().allreduce_scalar(most, comm::ReduceOp::Max);
  std::vector<char> send(static_cast<size_t>(most) * n * esz), recv(send.size());
  std::vector<int64_t> filled(n, 0);
  const char* src = static_cast<const char*>(a.local());
  if (a.on_grid())
    for (int64_t li = 0; li < a.local_rows(); ++li)
      for (int64_t lj = 0; lj < a.local_cols(); ++lj) {
        const int d = map.dest_rank(from.global_row(a.prow(), li), from.global_col(a.pcol(), lj));
        std::memcpy(send.data() + (d * most + filled[d]++) * esz,
                    src + (li * a.local_cols() + lj) * esz, esz);
      }
  if (n > 1 && most > 0)
    ctx.world().alltoall(send.data(), recv.data(), static_cast<size_t>(most) * esz, DType::U8).wait();
  else
    recv.swap(send);
  if (!out.on_grid()) return out;
  // Receiver: visit destination elements in each sender's order. Source
  // (i, j) ascending is destination rows ascending, or with a transpose
  // destination columns ascending.
  std::vector<int64_t> taken(n, 0);
  char* dst = static_cast<char*>(out.local());
  auto take = [&](int64_t li, int64_t lj) {
    const int s = map.source_rank(to.global_row(out.prow(), li), to.global_col(out.pcol(), lj));
    std::memcpy(dst + (li * out.local_cols() + lj) * esz, recv.data() + (s * most + taken[s]++) * esz,
                esz);
  };
  if (!transpose) {
    for (int64_t li = 0; li < out.local_rows(); ++li)
      for (int64_t lj = 0; lj < out.local_cols(); ++lj) take(li, lj);
  } else {
    for (int64_t lj = 0; lj < out.local_cols(); ++lj)
      for (int64_t li = 0; li < out.local_rows(); ++li) take(li, lj);
  }
  return out;
}

}  // namespace meshtrain::linalg
