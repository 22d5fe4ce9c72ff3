#include "meshtrain/kernels/cpu/conv2d.h"

#include <atomic>
#include <vector>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/image_reference.h"

namespace meshtrain::cpu {

namespace {

std::atomic<ConvBackend> g_backend{kDefaultConvBackend};

void check_shape(const Conv2dShape& s) {
  MT_CHECK(s.N > 0 && s.C > 0 && s.H > 0 && s.W > 0 && s.OC > 0 && s.KH > 0 && s.KW > 0 &&
               s.stride_h > 0 && s.stride_w > 0 && s.pad_h >= 0 && s.pad_w >= 0,
           "conv2d: bad shape N={} C={} H={} W={} OC={} K={}x{} stride={}x{} pad={}x{}", s.N, s.C,
           s.H, s.W, s.OC, s.KH, s.KW, s.stride_h, s.stride_w, s.pad_h, s.pad_w);
  MT_CHECK(s.H + 2 * s.pad_h >= s.KH && s.W + 2 * s.pad_w >= s.KW,
           "conv2d: kernel {}x{} larger than the padded input {}x{}", s.KH, s.KW,
           s.H + 2 * s.pad_h, s.W + 2 * s.pad_w);
}

bool use_onednn() {
#if defined(MESHTRAIN_HAVE_DNNL)
  return g_backend.load(std::memory_order_relaxed) != ConvBackend::Reference;
#else
  return false;
#endif
}

[[maybe_unused]] bool blocked_for(const Conv2dShape& s) {
  const ConvBackend b = g_backend.load(std::memory_order_relaxed);
  return b == ConvBackend::OneDnnBlocked ||
         (b == ConvBackend::OneDnnAuto && (s.KH > 1 || s.KW > 1));
}

ConvData data_of(HalfFormat fmt) { return fmt == HalfFormat::BF16 ? ConvData::BF16 : ConvData::F16; }

// A 16-bit operand widened to f32 in a per-thread scratch (`which` of three).
const float* widen(int which, HalfFormat fmt, const uint16_t* x, int64_t n) {
  thread_local std::vector<float> bufs[3];
  std::vector<float>& b = bufs[which];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  if (fmt == HalfFormat::BF16)
    bf16_to_f32(x, b.data(), static_cast<size_t>(n));
  else
    f16_to_f32(x, b.data(), static_cast<size_t>(n));
  return b.data();
}

// oneDNN's backward-weights pass overwrites; the table's parameter gradients
// accumulate, so it writes into scratch that is then added.
bool onednn_weights_accumulate(ConvData data, const Conv2dShape& s, const void* inp,
                               const void* dout, float* dweight, float* dbias) {
#if defined(MESHTRAIN_HAVE_DNNL)
  const int64_t nw = s.weight_numel();
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(nw + s.OC));
  if (!onednn_conv2d(ConvPass::BackwardWeights, data, s, blocked_for(s), inp, dout, scratch.data(),
                     dbias ? scratch.data() + nw : nullptr))
    return false;
  // Through a pointer: inside the parallel loop `scratch` would name each
  // worker thread's own (empty) thread_local vector.
  const float* sums = scratch.data();
#pragma omp parallel for schedule(static) if (nw > (1 << 16))
  for (int64_t i = 0; i < nw; ++i) dweight[i] += sums[i];
  if (dbias)
    for (int64_t i = 0; i < s.OC; ++i) dbias[i] += scratch[nw + i];
  return true;
#else
  (void)data, (void)s, (void)inp, (void)dout, (void)dweight, (void)dbias;
  return false;
#endif
}

}  // namespace

void set_conv2d_backend(ConvBackend b) { g_backend.store(b); }

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s) {
  check_shape(s);
#if defined(MESHTRAIN_HAVE_DNNL)
  if (use_onednn() &&
      onednn_conv2d(ConvPass::Forward, ConvData::F32, s, blocked_for(s), inp, weight, out, const_cast<float*>(bias)))
    return;
#endif
  conv2d_forward_reference(out, inp, weight, bias, s);
}

void conv2d_backward_data(float* dinp, const float* dout, const float* weight,
                          const Conv2dShape& s) {
  check_shape(s);
#if defined(MESHTRAIN_HAVE_DNNL)
  if (use_onednn() &&
      onednn_conv2d(ConvPass::BackwardData, ConvData::F32, s, blocked_for(s), dout, weight, dinp, nullptr))
    return;
#endif
  conv2d_backward_data_reference(dinp, dout, weight, s);
}

void conv2d_backward_weights(float* dweight, float* dbias, const float* dout, const float* inp,
                             const Conv2dShape& s) {
  check_shape(s);
  if (use_onednn() && onednn_weights_accumulate(ConvData::F32, s, inp, dout, dweight, dbias))
    return;
  conv2d_backward_weights_reference(dweight, dbias, dout, inp, s);
}

void conv2d_forward_half(HalfFormat fmt, float* out, const uint16_t* inp, const uint16_t* weight,
                         const float* bias, const Conv2dShape& s) {
  check_shape(s);
#if defined(MESHTRAIN_HAVE_DNNL)
  if (use_onednn() &&
      onednn_conv2d(ConvPass::Forward, data_of(fmt), s, blocked_for(s), inp, weight, out, const_cast<float*>(bias)))
    return;
#endif
  conv2d_forward(out, widen(0, fmt, inp, s.in_numel()), widen(1, fmt, weight, s.weight_numel()),
                 bias, s);
}

void conv2d_backward_data_half(HalfFormat fmt, float* dinp, const uint16_t* dout,
                               const uint16_t* weight, const Conv2dShape& s) {
  check_shape(s);
#if defined(MESHTRAIN_HAVE_DNNL)
  if (use_onednn() && onednn_conv2d(ConvPass::BackwardData, data_of(fmt), s, blocked_for(s), dout, weight, dinp, nullptr))
    return;
#endif
  conv2d_backward_data(dinp, widen(0, fmt, dout, s.out_numel()),
                       widen(1, fmt, weight, s.weight_numel()), s);
}

void conv2d_backward_weights_half(HalfFormat fmt, float* dweight, float* dbias,
                                  const uint16_t* dout, const uint16_t* inp,
                                  const Conv2dShape& s) {
  check_shape(s);
  if (use_onednn() && onednn_weights_accumulate(data_of(fmt), s, inp, dout, dweight, dbias)) return;
  conv2d_backward_weights(dweight, dbias, widen(0, fmt, dout, s.out_numel()),
                          widen(1, fmt, inp, s.in_numel()), s);
}

std::string conv2d_path(ConvPass pass, ConvData data, const Conv2dShape& s) {
#if defined(MESHTRAIN_HAVE_DNNL)
  if (use_onednn()) {
    const std::string impl = onednn_conv2d_impl(pass, data, s, blocked_for(s), false);
    if (impl != "none") return "onednn " + impl;
    if (data != ConvData::F32) return "widened to f32, then " + conv2d_path(pass, ConvData::F32, s);
  }
#endif
  if (data != ConvData::F32) return "widened to f32, then reference";
  (void)pass, (void)s;
  return "reference";
}

}  // namespace meshtrain::cpu
