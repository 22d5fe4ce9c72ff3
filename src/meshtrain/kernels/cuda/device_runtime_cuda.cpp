#include "meshtrain/kernels/cuda/device_runtime_cuda.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "meshtrain/core/device_runtime.h"
#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cuda/cuda_check.h"

namespace meshtrain {

namespace {
std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
cudaStream_t native(Stream s) { return static_cast<cudaStream_t>(s.handle); }
cudaEvent_t native(Event e) { return static_cast<cudaEvent_t>(e.handle); }

class CudaRuntime final : public DeviceRuntime {
 public:
  int device_count() const override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return n;
  }

  void* allocate(Device d, size_t bytes, MemCategory cat, Stream s) override {
    void* p = allocator(d).allocate(bytes, cat, s.handle);
    fill_zero(p, bytes, s);  // zero-filled, as host storage is
    return p;
  }
  void release(Device d, void* p, size_t, MemCategory) override { allocator(d).release(p); }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            Stream s) override {
    if (bytes == 0) return;
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(s)));
    // A copy touching ordinary (pageable) host memory finishes before the
    // call returns, so the caller may read or reuse that memory at once.
    const bool host_side = dst_device.is_cpu() || src_device.is_cpu();
    const void* host = dst_device.is_cpu() ? dst : src;
    if (host_side && !is_pinned(host)) MT_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  }
  void fill_zero(void* p, size_t bytes, Stream s) override {
    if (bytes) MT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, native(s)));
  }
  void* allocate_pinned(size_t bytes) override {
    void* p = nullptr;
    MT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.insert(p);
    return p;
  }
  void release_pinned(void* p) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.erase(p);
    }
    MT_CUDA_CHECK(cudaFreeHost(p));
  }

  Stream create_stream(Device d) override {
    set_device(d);
    cudaStream_t s = nullptr;
    // Blocking with respect to the legacy default stream, on which storage
    // is zero-filled and setup copies run: a tensor made there is ready
    // before any later work on this stream reads it.
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
    return {d, s};
  }
  void destroy_stream(Stream s) override {
    if (s.handle) MT_CUDA_CHECK(cudaStreamDestroy(native(s)));
  }
  void synchronize(Stream s) override { MT_CUDA_CHECK(cudaStreamSynchronize(native(s))); }
  Event create_event(Device d) override {
    set_device(d);
    cudaEvent_t e = nullptr;
    MT_CUDA_CHECK(cudaEventCreate(&e));
    return {d, e};
  }
  void destroy_event(Event e) override {
    if (e.handle) MT_CUDA_CHECK(cudaEventDestroy(native(e)));
  }
  void record(Event e, Stream s) override { MT_CUDA_CHECK(cudaEventRecord(native(e), native(s))); }
  void wait(Stream s, Event e) override {
    MT_CUDA_CHECK(cudaStreamWaitEvent(native(s), native(e), 0));
  }
  bool query(Event e) override {
    const cudaError_t r = cudaEventQuery(native(e));
    if (r == cudaErrorNotReady) return false;
    MT_CUDA_CHECK(r);
    return true;
  }
  void synchronize(Event e) override { MT_CUDA_CHECK(cudaEventSynchronize(native(e))); }
  double elapsed_ms(Event a, Event b) override {
    float ms = 0;
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms, native(a), native(b)));
    return ms;
  }
  DeviceMemStats memory_stats(Device d) override { return allocator(d).stats(); }
  void reset_peaks(Device d) override { allocator(d).reset_peaks(); }
  // SMs x clock x the architecture's dense rate per SM and clock: tensor
  // cores with 16-bit operands, the f32 cores otherwise. H100/H200 SXM (132
  // SMs of sm_90) are quoted at their datasheet's 989.4 TFLOP/s (bf16 dense,
  // 1830 MHz), the figure MFU is conventionally reported against.
  Peak matrix_peak(Device d, bool half_operands) override {
    set_device(d);
    int major = 0, minor = 0, sms = 0, khz = 0;
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d.index));
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d.index));
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d.index));
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d.index));
    const int cc = major * 10 + minor;
    if (cc == 90 && sms == 132)
      return half_operands ? Peak{989.4e3, "H100/H200 SXM datasheet, dense bf16/fp16"}
                           : Peak{66.9e3, "H100/H200 SXM datasheet, f32"};
    // FLOP per clock per SM, dense: tensor 16-bit, then f32.
    const double tensor = cc >= 90 ? 4096 : cc == 80 ? 2048 : cc >= 75 ? 1024 : 0;
    const double f32 = cc == 80 ? 128 : 256;
    const double rate = half_operands ? tensor : f32;
    if (rate == 0 || khz <= 0) return {};
    return {sms * rate * khz * 1e-6,
            fmt::format("{} SMs x {} MHz x {:.0f} FLOP/clock (sm_{})", sms, khz / 1000, rate, cc)};
  }
  std::string describe() override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return std::string("no GPU visible (") + cudaGetErrorString(e) + ")";
    }
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    std::string s = std::to_string(n) + " GPU(s), driver " + version_text(driver) + ", runtime " +
                    version_text(runtime);
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
      s += "; cuda:" + std::to_string(i) + " " + p.name + " (sm_" + std::to_string(p.major) +
           std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
           std::to_string(p.totalGlobalMem >> 20) + " MiB)";
    }
    return s;
  }

 private:
  void set_device(Device d) {
    MT_CHECK(!d.is_cpu(), "the CUDA runtime was asked for {}", d.str());
    MT_CUDA_CHECK(cudaSetDevice(d.index));
  }
  bool is_pinned(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return pinned_.count(const_cast<void*>(p)) != 0;  // only buffers from allocate_pinned
  }
  CachingAllocator& allocator(Device d) {
    std::lock_guard<std::mutex> lock(mu_);
    const int n = device_count();
    MT_CHECK(d.type == DeviceType::CUDA && d.index >= 0 && d.index < n,
             "{} is not a visible GPU ({} visible; CUDA_VISIBLE_DEVICES picks them)", d.str(), n);
    if (allocators_.size() < static_cast<size_t>(n)) allocators_.resize(static_cast<size_t>(n));
    auto& a = allocators_[static_cast<size_t>(d.index)];
    if (!a) {
      const int index = d.index;
      a = std::make_unique<CachingAllocator>(RawAllocator{
          [index](size_t bytes) -> void* {
            void* p = nullptr;
            MT_CUDA_CHECK(cudaSetDevice(index));
            if (cudaMalloc(&p, bytes) != cudaSuccess) {
              cudaGetLastError();  // out of memory is not sticky; clear it
              return nullptr;
            }
            return p;
          },
          [](void* p) { cudaFree(p); }, d.str()});
    }
    return *a;
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
  std::unordered_set<void*> pinned_;
};
}  // namespace

bool register_cuda_runtime() {
  static CudaRuntime runtime;
  static const bool once = (register_device_runtime(DeviceType::CUDA, &runtime), true);
  return once;
}

}  // namespace meshtrain
