#include "meshtrain/kernels/cpu/onednn_conv2d.h"

#if defined(MESHTRAIN_HAVE_DNNL)
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "meshtrain/kernels/cpu/onednn_matmul.h"

namespace meshtrain::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// oneDNN's OpenMP runtime plans the work split for omp_get_max_threads() when
// a primitive is made, so the thread count is part of the key.
struct Key {
  ConvPass pass;
  ConvData data;
  Conv2dShape s;
  bool bias, blocked;
  int threads;
  auto tie() const {
    return std::tie(pass, data, s.N, s.C, s.H, s.W, s.OC, s.KH, s.KW, s.stride_h, s.stride_w,
                    s.pad_h, s.pad_w, bias, blocked, threads);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// One operand (src, weights or dst; the diff_ ones in the backward passes):
// the caller's plain layout, the primitive's, and the reorder between them
// (null when they are the same).
struct Operand {
  dnnl::memory::desc plain, used;
  std::shared_ptr<dnnl::reorder> reorder;  // plain -> used for inputs, used -> plain for outputs
};

struct Prim {
  std::shared_ptr<dnnl::primitive> prim;  // null: no implementation
  Operand src, wei, dst;
  dnnl::memory::desc bias;
  std::string impl = "none";
};

dt io_type(ConvData d) { return d == ConvData::F32 ? dt::f32 : d == ConvData::BF16 ? dt::bf16 : dt::f16; }

void set_layout(Operand& o, const dnnl::memory::desc& used, bool is_output) {
  o.used = used;
  if (used == o.plain) return;
  const dnnl::engine& eng = onednn_engine();
  o.reorder = std::make_shared<dnnl::reorder>(
      is_output ? dnnl::reorder::primitive_desc(eng, used, eng, o.plain)
                : dnnl::reorder::primitive_desc(eng, o.plain, eng, used));
}

Prim make(const Key& k) {
  const Conv2dShape& s = k.s;
  const dt io = io_type(k.data);
  const dnnl::memory::dims strides{s.stride_h, s.stride_w}, pad{s.pad_h, s.pad_w};
  const dnnl::memory::dims src_d{s.N, s.C, s.H, s.W}, wei_d{s.OC, s.C, s.KH, s.KW},
      dst_d{s.N, s.OC, s.OH(), s.OW()};
  // Inputs in `io`, outputs f32: the forward reads src; backward-data writes it.
  const dt src_t = k.pass == ConvPass::BackwardData ? dt::f32 : io;
  const dt wei_t = k.pass == ConvPass::BackwardWeights ? dt::f32 : io;
  const dt dst_t = k.pass == ConvPass::Forward ? dt::f32 : io;
  Prim p;
  p.src.plain = dnnl::memory::desc(src_d, src_t, tag::nchw);
  p.wei.plain = dnnl::memory::desc(wei_d, wei_t, tag::oihw);
  p.dst.plain = dnnl::memory::desc(dst_d, dst_t, tag::nchw);
  if (k.bias) p.bias = dnnl::memory::desc({s.OC}, dt::f32, tag::x);
  // Blocked: oneDNN picks its layouts (nChw16c, ...), usually a direct jit
  // kernel instead of im2col + GEMM; plain: the caller's NCHW as it is.
  auto md = [&](const dnnl::memory::dims& d, dt t, tag plain) {
    return dnnl::memory::desc(d, t, k.blocked ? tag::any : plain);
  };
  const auto src = md(src_d, src_t, tag::nchw), wei = md(wei_d, wei_t, tag::oihw),
             dst = md(dst_d, dst_t, tag::nchw);
  const dnnl::engine& eng = onednn_engine();
  try {
    // The backward passes take a forward primitive descriptor as a hint.
    // Padding on the right equal to the left's: oneDNN's output size is
    // then the same floor as PyTorch's.
    const dnnl::convolution_forward::desc fwd(
        dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
        md(src_d, io, tag::nchw), md(wei_d, io, tag::oihw), p.bias, md(dst_d, dt::f32, tag::nchw),
        strides, pad, pad);
    const dnnl::convolution_forward::primitive_desc fwd_pd(fwd, eng);
    if (k.pass == ConvPass::Forward) {
      p.impl = fwd_pd.impl_info_str();
      p.prim = std::make_shared<dnnl::convolution_forward>(fwd_pd);
      set_layout(p.src, fwd_pd.src_desc(), false);
      set_layout(p.wei, fwd_pd.weights_desc(), false);
      set_layout(p.dst, fwd_pd.dst_desc(), true);
    } else if (k.pass == ConvPass::BackwardData) {
      const dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, src, wei,
                                                    dst, strides, pad, pad);
      const dnnl::convolution_backward_data::primitive_desc pd(d, eng, fwd_pd);
      p.impl = pd.impl_info_str();
      p.prim = std::make_shared<dnnl::convolution_backward_data>(pd);
      set_layout(p.src, pd.diff_src_desc(), true);
      set_layout(p.wei, pd.weights_desc(), false);
      set_layout(p.dst, pd.diff_dst_desc(), false);
    } else {
      const dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, src,
                                                       wei, p.bias, dst, strides, pad, pad);
      const dnnl::convolution_backward_weights::primitive_desc pd(d, eng, fwd_pd);
      p.impl = pd.impl_info_str();
      p.prim = std::make_shared<dnnl::convolution_backward_weights>(pd);
      set_layout(p.src, pd.src_desc(), false);
      set_layout(p.wei, pd.diff_weights_desc(), true);
      set_layout(p.dst, pd.diff_dst_desc(), false);
    }
  } catch (const dnnl::error&) {
    return Prim{};  // unimplemented for this type or ISA (e.g. bf16 under an AVX2 cap)
  }
  if (k.data != ConvData::F32 && p.impl.rfind("ref", 0) == 0) return Prim{};
  return p;
}

const Prim& cached(const Key& k) {
  static std::mutex* mu = new std::mutex();  // never destroyed: usable from exit-time code
  static auto* cache = new std::map<Key, Prim>();
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(k);
  if (it == cache->end()) it = cache->emplace(k, make(k)).first;  // std::map: stable references
  return it->second;
}

// The caller's buffer as the primitive's operand: itself, or (blocked) a
// per-thread scratch in the primitive's layout, filled from it for an input.
dnnl::memory bind(const Operand& o, int slot, const void* ptr, bool is_output,
                  const dnnl::stream& stream) {
  const dnnl::engine& eng = onednn_engine();
  dnnl::memory user(o.plain, eng, const_cast<void*>(ptr));
  if (!o.reorder) return user;
  thread_local std::vector<char> scratch[3];
  std::vector<char>& buf = scratch[slot];
  const size_t need = o.used.get_size() + 64;
  if (buf.size() < need) buf.resize(need);
  void* aligned = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  dnnl::memory used(o.used, eng, aligned);
  if (!is_output) o.reorder->execute(stream, user, used);
  return used;
}

}  // namespace

bool onednn_conv2d(ConvPass pass, ConvData data, const Conv2dShape& s, bool blocked,
                   const void* a, const void* b, float* out, float* bias) {
  const Prim& p = cached(Key{pass, data, s, bias != nullptr, blocked, omp_get_max_threads()});
  if (!p.prim) return false;
  const dnnl::engine& eng = onednn_engine();
  thread_local dnnl::stream stream(eng);
  // Which caller pointer each operand is, and which one is the output.
  const void* src = pass == ConvPass::BackwardData ? out : a;
  const void* wei = pass == ConvPass::BackwardWeights ? out : b;
  const void* dst = pass == ConvPass::Forward ? out : pass == ConvPass::BackwardData ? a : b;
  const bool out_src = pass == ConvPass::BackwardData, out_wei = pass == ConvPass::BackwardWeights,
             out_dst = pass == ConvPass::Forward;
  dnnl::memory ms = bind(p.src, 0, src, out_src, stream), mw = bind(p.wei, 1, wei, out_wei, stream),
               md = bind(p.dst, 2, dst, out_dst, stream);
  std::unordered_map<int, dnnl::memory> args;
  if (pass == ConvPass::Forward) {
    args = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
    if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, eng, bias));
  } else if (pass == ConvPass::BackwardData) {
    args = {{DNNL_ARG_DIFF_DST, md}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, ms}};
  } else {
    args = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_DIFF_DST, md}, {DNNL_ARG_DIFF_WEIGHTS, mw}};
    if (bias) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(p.bias, eng, bias));
  }
  p.prim->execute(stream, args);
  // The output back to the caller's layout.
  const Operand& o = out_src ? p.src : out_wei ? p.wei : p.dst;
  dnnl::memory& used = out_src ? ms : out_wei ? mw : md;
  if (o.reorder) {
    dnnl::memory user(o.plain, eng, out);
    o.reorder->execute(stream, used, user);
  }
  stream.wait();
  return true;
}

std::string onednn_conv2d_impl(ConvPass pass, ConvData data, const Conv2dShape& s, bool blocked,
                               bool bias) {
  const Prim& p = cached(Key{pass, data, s, bias, blocked, omp_get_max_threads()});
  if (!p.prim) return "none";
  const bool reordered = p.src.reorder || p.wei.reorder || p.dst.reorder;
  return p.impl + (reordered ? " (oneDNN's layouts, reordered)" : "");
}

}  // namespace meshtrain::cpu
#endif
