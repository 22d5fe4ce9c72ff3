#include "meshtrain/kernels/cpu/onednn_matmul.h"

#include <unordered_map>

#include "meshtrain/core/error.h"

#if defined(MESHTRAIN_HAVE_DNNL)
namespace meshtrain::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

OneDnnMatmul make_onednn_matmul(dnnl::memory::data_type ab, bool ta,
                                bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                                int64_t ldb, int64_t ldc, bool accumulate, bool bias) {
  using dims = dnnl::memory::dims;
  OneDnnMatmul m;
  // op(A) is (M, K): its rows step lda, or 1 when A is stored transposed.
  m.a = dnnl::memory::desc(dims{M, K}, ab, ta ? dims{1, lda} : dims{lda, 1});
  m.b = dnnl::memory::desc(dims{K, N}, ab, tb ? dims{1, ldb} : dims{ldb, 1});
  m.c = dnnl::memory::desc(dims{M, N}, dnnl::memory::data_type::f32, dims{ldc, 1});
  if (bias) m.bias = dnnl::memory::desc(dims{1, N}, dnnl::memory::data_type::f32, dims{N, 1});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd =
      bias ? dnnl::matmul::primitive_desc(onednn_engine(), m.a, m.b, m.bias, m.c, attr)
           : dnnl::matmul::primitive_desc(onednn_engine(), m.a, m.b, m.c, attr);
#else
  dnnl::matmul::primitive_desc pd(
      bias ? dnnl::matmul::desc(m.a, m.b, m.bias, m.c) : dnnl::matmul::desc(m.a, m.b, m.c), attr,
      onednn_engine());
#endif
  m.impl = pd.impl_info_str();
  m.prim = std::make_shared<dnnl::matmul>(pd);
  return m;
}

void run_onednn_matmul(const OneDnnMatmul& m, const void* A, const void* B, float* C,
                       const float* bias) {
  const dnnl::engine& engine = onednn_engine();
  thread_local dnnl::stream stream(engine);
  dnnl::memory am(m.a, engine, const_cast<void*>(A));
  dnnl::memory bm(m.b, engine, const_cast<void*>(B));
  dnnl::memory cm(m.c, engine, C);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  const bool has_bias = m.bias != dnnl::memory::desc();
  MT_CHECK(has_bias == (bias != nullptr), "oneDNN matmul: made {} a bias, run {} one",
           has_bias ? "with" : "without", bias ? "with" : "without");
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(m.bias, engine, const_cast<float*>(bias)));
  m.prim->execute(stream, args);
  stream.wait();
}

}  // namespace meshtrain::cpu
#endif
