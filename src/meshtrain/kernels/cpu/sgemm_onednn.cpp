#include "meshtrain/kernels/cpu/sgemm_onednn.h"

#include <fmt/format.h>
#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "meshtrain/core/error.h"

#include "meshtrain/kernels/cpu/onednn_matmul.h"

namespace meshtrain::cpu {

bool onednn_sgemm_available() {
#if defined(MESHTRAIN_HAVE_DNNL)
  return true;
#else
  return false;
#endif
}

#if defined(MESHTRAIN_HAVE_DNNL)
namespace {

// A primitive is built for a thread count (oneDNN's OpenMP runtime reads
// omp_get_max_threads() when it plans the work split), so it is part of the key.
struct Problem {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  bool accumulate;  // beta == 1: a sum post-op reads C
  int threads;
  bool bias;
  auto key() const { return std::tie(ta, tb, M, N, K, lda, ldb, ldc, accumulate, threads, bias); }
  bool operator<(const Problem& o) const { return key() < o.key(); }
};

class OneDnnF32 {
 public:
  const OneDnnMatmul& get(const Problem& p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(p);
    if (it != cache_.end()) return it->second;
    OneDnnMatmul e = make_onednn_matmul(dnnl::memory::data_type::f32, p.ta, p.tb, p.M, p.N, p.K,
                                        p.lda, p.ldb, p.ldc, p.accumulate, p.bias);
    if (impl_.empty()) impl_ = e.impl;
    return cache_.emplace(p, std::move(e)).first->second;  // std::map: references stay valid
  }

  void run(const Problem& p, const float* A, const float* B, float* C, const float* bias) {
    run_onednn_matmul(get(p), A, B, C, bias);
  }

  std::string impl_name() {
    get(Problem{false, true, 256, 256, 256, 256, 256, 256, false, omp_get_max_threads(), false});
    std::lock_guard<std::mutex> lock(mu_);
    return impl_;
  }

 private:
  std::mutex mu_;
  std::map<Problem, OneDnnMatmul> cache_;
  std::string impl_;  // the implementation of the first primitive made
};

OneDnnF32& onednn_f32() {
  static OneDnnF32* o = new OneDnnF32();  // never destroyed: usable from exit-time code
  return *o;
}

}  // namespace
#endif

void sgemm_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t lda, const float* B, int64_t ldb, bool accumulate, float* C,
                  int64_t ldc, const float* bias) {
#if defined(MESHTRAIN_HAVE_DNNL)
  MT_CHECK(M > 0 && N > 0 && K > 0, "sgemm_onednn: empty problem ({}, {}, {})", M, N, K);
  onednn_f32().run(Problem{trans_a, trans_b, M, N, K, lda, ldb, ldc, accumulate,
                           omp_get_max_threads(), bias != nullptr},
                   A, B, C, bias);
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb,
      (void)accumulate, (void)C, (void)ldc, (void)bias;
  throw Error("sgemm_onednn: this build has no oneDNN (install libdnnl-dev and reconfigure)");
#endif
}

std::string onednn_sgemm_description() {
#if defined(MESHTRAIN_HAVE_DNNL)
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} {}", v->major, v->minor, v->patch, onednn_f32().impl_name());
#else
  return "oneDNN: not built in";
#endif
}

}  // namespace meshtrain::cpu
