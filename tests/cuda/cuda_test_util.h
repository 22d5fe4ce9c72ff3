// Helpers of the CUDA kernel tests: device buffers, seeded random inputs and
// element-wise comparisons that name the first mismatch.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace meshtrain::cuda_test {

// Empty when a GPU is visible, else why not.
inline std::string gpu_unavailable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return cudaGetErrorString(e);
  if (n == 0) return "cudaGetDeviceCount found 0 devices";
  return "";
}

#define MT_REQUIRE_GPU()                                                       \
  do {                                                                         \
    const std::string mt_why_ = ::meshtrain::cuda_test::gpu_unavailable();     \
    if (!mt_why_.empty()) GTEST_SKIP() << "no CUDA GPU visible: " << mt_why_;  \
  } while (0)

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device memory holding a copy of a host vector (or n zero bytes' worth).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    check(cudaMalloc(&p_, sizeof(T) * (n ? n : 1)), "cudaMalloc");
    check(cudaMemset(p_, 0, sizeof(T) * (n ? n : 1)), "cudaMemset");
  }
  explicit DeviceBuffer(const std::vector<T>& h) : DeviceBuffer(h.size()) { upload(h); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& h) {
    check(cudaMemcpy(p_, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice), "upload");
  }
  // Waits for all device work first, and reports a kernel's failure.
  std::vector<T> host() const {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> h(n_);
    check(cudaMemcpy(h.data(), p_, sizeof(T) * n_, cudaMemcpyDeviceToHost), "download");
    return h;
  }
  T* get() { return static_cast<T*>(p_); }
  const T* get() const { return static_cast<const T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> uniform(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline std::vector<int32_t> ints(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline float max_abs(const std::vector<float>& v) {
  float m = 0.f;
  for (float x : v) m = std::fmax(m, std::fabs(x));
  return m;
}

// |got - want| <= atol + rtol |want| everywhere (NaN matches NaN, and an
// infinity the same infinity: inf - inf is NaN, which no bound admits).
inline ::testing::AssertionResult close(const std::vector<float>& got,
                                        const std::vector<float>& want, double atol, double rtol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (got[i] == want[i]) continue;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(err <= tol)) {
      if (bad == 0) first = i;
      ++bad;
    }
    if (err > worst) worst = err;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ; first at " << first << ": got "
         << got[first] << ", want " << want[first] << " (atol " << atol << ", rtol " << rtol
         << ", largest error " << worst << ")";
}

// |got - want| <= tol[i] (a bound per element).
inline ::testing::AssertionResult within(const std::vector<float>& got,
                                         const std::vector<float>& want,
                                         const std::vector<double>& tol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol[i])) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size()
                                       << " elements differ; first at " << first << ": got "
                                       << got[first] << ", want " << want[first] << " (bound "
                                       << tol[first] << ")";
}

// The same bits everywhere.
template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      std::ostringstream os;
      os << "element " << i << " differs: got " << +got[i] << ", want " << +want[i];
      return ::testing::AssertionFailure() << os.str();
    }
  return ::testing::AssertionSuccess();
}

}  // namespace meshtrain::cuda_test
