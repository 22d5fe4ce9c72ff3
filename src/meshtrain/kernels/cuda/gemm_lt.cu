#include "meshtrain/kernels/cuda/gemm_lt.h"

#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "meshtrain/kernels/cuda/cuda_common.cuh"

namespace meshtrain::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // NVIDIA's advice for Hopper

// One cuBLASLt handle (and a cuBLAS handle for the fallback) per device,
// created on first use and kept for the process.
struct DeviceHandles {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  std::mutex blas_mu;  // cublasSetStream + call must not interleave between threads
};

// cuBLASLt's choice for a problem, or none (then cublasGemmEx runs it).
// (Not std::optional: nvcc 13's front end fails on it in C++20 mode.)
struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

using AlgoKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, bool, int, int, int, int>;

struct State {
  std::mutex mu;
  std::map<int, DeviceHandles*> devices;  // never freed: usable until exit
  // A workspace per (device, stream): two streams running GEMMs at the same
  // time must not share one.
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::map<AlgoKey, CachedAlgo> algos;
};

State& state() {
  static State* s = new State();
  return *s;
}

int current_device() {
  int d = 0;
  MT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

DeviceHandles& handles(int dev) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceHandles*& h = st.devices[dev];
  if (!h) {
    auto* fresh = new DeviceHandles();
    MT_CUBLAS_CHECK(cublasLtCreate(&fresh->lt));
    MT_CUBLAS_CHECK(cublasCreate(&fresh->blas));
    h = fresh;
  }
  return *h;
}

void* workspace(int dev, cudaStream_t stream) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  void*& w = st.workspaces[{dev, stream}];
  if (!w) MT_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
  return w;
}

// The largest power of two (up to 256) the address is a multiple of.
int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);
  return low >= 256 ? 256 : static_cast<int>(low);
}

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() { if (d) cublasLtMatmulDescDestroy(d); }
};
struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  ~Layout() { if (d) cublasLtMatrixLayoutDestroy(d); }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() { if (d) cublasLtMatmulPreferenceDestroy(d); }
};


// Tries cuBLASLt; false when it has no algorithm for the problem (nothing
// was written then).
bool try_lt(cudaStream_t stream, int dev, cudaDataType_t ab, bool ta, bool tb, int64_t m, int64_t n,
            int64_t k, float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
            float beta, float* C, int64_t ldc, const float* bias) {
  DeviceHandles& h = handles(dev);
  MatmulDesc op;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const int32_t bias_type = CUDA_R_32F;
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  Layout la, lb, lc;
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la.d, ab, ta ? k : m, ta ? m : k, lda));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb.d, ab, tb ? n : k, tb ? k : n, ldb));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc.d, CUDA_R_32F, m, n, ldc));

  const int al_a = alignment_of(A), al_b = alignment_of(B), al_c = alignment_of(C);
  const AlgoKey key{dev, static_cast<int>(ab), ta, tb, m, n, k, lda, ldb, ldc, bias != nullptr,
                    al_a, al_b, al_c, bias ? alignment_of(bias) : 256};
  State& st = state();
  CachedAlgo algo;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.algos.find(key);
    if (it != st.algos.end()) {
      known = true;
      algo = it->second;
    }
  }
  if (!known) {
    Preference pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.d));
    const uint64_t ws = kWorkspaceBytes;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t ua = al_a, ub = al_b, uc = al_c;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof(ua)));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof(ub)));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &uc, sizeof(uc)));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &uc, sizeof(uc)));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h.lt, op.d, la.d, lb.d, lc.d, lc.d,
                                                             pref.d, 1, &result, &count);
    if (hs == CUBLAS_STATUS_SUCCESS && count > 0) algo = {true, result.algo};
    std::lock_guard<std::mutex> lock(st.mu);
    st.algos[key] = algo;
  }
  if (!algo.found) return false;
  void* ws = workspace(dev, stream);
  const cublasStatus_t rs = cublasLtMatmul(h.lt, op.d, &alpha, A, la.d, B, lb.d, &beta, C, lc.d, C,
                                           lc.d, &algo.algo, ws, kWorkspaceBytes, stream);
  if (rs == CUBLAS_STATUS_NOT_SUPPORTED) {  // rejected before running: take the fallback from now on
    std::lock_guard<std::mutex> lock(st.mu);
    st.algos[key] = CachedAlgo{};
    return false;
  }
  MT_CUBLAS_CHECK(rs);
  return true;
}

// C[col * ldc + row] = beta C + bias[row] (K == 0: no product to add).
__global__ void scale_bias_kernel(float* C, int64_t ldc, int64_t m, int64_t n, float beta,
                                  const float* bias) {
  const int64_t total = m * n;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx % m, col = idx / m;
    float* c = C + col * ldc + row;
    float v = beta == 0.f ? 0.f : beta * *c;  // beta 0 never reads C (BLAS)
    if (bias) v += bias[row];
    *c = v;
  }
}

__global__ void add_bias_kernel(float* C, int64_t ldc, int64_t m, int64_t n, const float* bias) {
  const int64_t total = m * n;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = idx % m, col = idx / m;
    C[col * ldc + row] += bias[row];
  }
}

}  // namespace

void gemm_colmajor(Stream s, cudaDataType_t ab, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
                   float* C, int64_t ldc, const float* bias) {
  if (m <= 0 || n <= 0) return;
  const cudaStream_t stream = stream_of(s);
  if (k <= 0) {
    scale_bias_kernel<<<blocks_for(m * n), kThreads, 0, stream>>>(C, ldc, m, n, beta, bias);
    MT_CUDA_CHECK_LAUNCH("gemm (K = 0)");
    return;
  }
  const int dev = current_device();
  // The epilogue reads the bias with vector loads: fuse only an aligned one.
  const bool fuse_bias = bias && alignment_of(bias) >= 16;
  if (try_lt(stream, dev, ab, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
             fuse_bias ? bias : nullptr)) {
    if (bias && !fuse_bias) {
      add_bias_kernel<<<blocks_for(m * n), kThreads, 0, stream>>>(C, ldc, m, n, bias);
      MT_CUDA_CHECK_LAUNCH("gemm bias");
    }
    return;
  }
  MT_OP_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                  ldc <= INT_MAX,
              "gemm", "no cuBLASLt algorithm and the shape exceeds cublasGemmEx's int range");
  DeviceHandles& h = handles(dev);
  void* ws = workspace(dev, stream);
  {
    std::lock_guard<std::mutex> lock(h.blas_mu);
    MT_CUBLAS_CHECK(cublasSetStream(h.blas, stream));
    MT_CUBLAS_CHECK(cublasSetWorkspace(h.blas, ws, kWorkspaceBytes));
    MT_CUBLAS_CHECK(cublasGemmEx(h.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha,
                                 A, ab, static_cast<int>(lda), B, ab, static_cast<int>(ldb), &beta, C,
                                 CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  }
  if (bias) {
    add_bias_kernel<<<blocks_for(m * n), kThreads, 0, stream>>>(C, ldc, m, n, bias);
    MT_CUDA_CHECK_LAUNCH("gemm bias");
  }
}

// Row-major f64 and strided-batched f32 on cuBLAS (f64 has no Lt epilogue to
// gain; batched small products are what cublas*StridedBatched is for). Row-
// major C is column-major C^T = op(B)^T op(A)^T: operands swap, flags stay.
void dgemm_rowmajor(Stream s, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                    const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                    double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  MT_OP_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                  ldc <= INT_MAX,
              "dgemm", "the shape exceeds cublasDgemm's int range");
  const cudaStream_t stream = stream_of(s);
  DeviceHandles& h = handles(current_device());
  std::lock_guard<std::mutex> lock(h.blas_mu);
  MT_CUBLAS_CHECK(cublasSetStream(h.blas, stream));
  MT_CUBLAS_CHECK(cublasDgemm(h.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                              B, static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
                              static_cast<int>(ldc)));
}

void sgemm_strided_batched_rowmajor(Stream s, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                    float alpha, const float* A, int64_t lda, int64_t stride_a,
                                    const float* B, int64_t ldb, int64_t stride_b, float beta,
                                    float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M <= 0 || N <= 0 || batch <= 0) return;
  MT_OP_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && batch <= INT_MAX,
              "sgemm_strided_batched", "the shape exceeds cuBLAS's int range");
  const cudaStream_t stream = stream_of(s);
  DeviceHandles& h = handles(current_device());
  std::lock_guard<std::mutex> lock(h.blas_mu);
  MT_CUBLAS_CHECK(cublasSetStream(h.blas, stream));
  MT_CUBLAS_CHECK(cublasSgemmStridedBatched(
      h.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
      static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), stride_b, A,
      static_cast<int>(lda), stride_a, &beta, C, static_cast<int>(ldc), stride_c,
      static_cast<int>(batch)));
}

void gemm_rowmajor(Stream s, cudaDataType_t ab, bool trans_a, bool trans_b, int64_t M, int64_t N,
                   int64_t K, float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                   float beta, float* C, int64_t ldc) {
  // Row-major C (M, N) is column-major C^T (N, M) = op(B)^T op(A)^T, and a
  // row-major operand read column-major is its transpose: swap the operands,
  // keep each one's transpose flag.
  gemm_colmajor(s, ab, trans_b, trans_a, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc, nullptr);
}

}  // namespace meshtrain::cuda
