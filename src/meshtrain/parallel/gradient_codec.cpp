#include "meshtrain/parallel/gradient_codec.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/parallel/powersgd_codec.h"
#include "meshtrain/parallel/sign_codec.h"
#include "meshtrain/parallel/topk_codec.h"

namespace meshtrain::parallel {

namespace {

class WorksThen final : public BucketReduction {
 public:
  WorksThen(std::vector<comm::Work> works, std::function<void()> then)
      : works_(std::move(works)), then_(std::move(then)) {}
  void finish() override {
    if (done_) return;
    comm::wait_all(works_);
    done_ = true;  // before decoding: a decode that throws is not retried
    if (then_) then_();
  }

 private:
  std::vector<comm::Work> works_;
  std::function<void()> then_;
  bool done_ = false;
};

// The gradients themselves, averaged in place.
class F32Codec final : public GradientCodec {
 public:
  explicit F32Codec(CodecContext ctx) : ctx_(std::move(ctx)) {}
  std::string name() const override { return "f32"; }
  std::string describe() const override { return "f32 gradients"; }
  std::optional<DType> summable_dtype() const override { return DType::F32; }
  std::unique_ptr<BucketReduction> start(float* grads, ElemSpan span) override {
    return allreduce_f32(ctx_, grads, span);
  }

 private:
  CodecContext ctx_;
};

// Rounded into a shared bf16 buffer, averaged there, widened back: half the
// bytes of f32, rounding error about 2^-9 relative per element and step.
class Bf16Codec final : public GradientCodec {
 public:
  explicit Bf16Codec(CodecContext ctx) : ctx_(std::move(ctx)) {
    // Collective: every rank maps every peer's wire (in-place reduction, no copy-in).
    wire_ = ctx_.comm->alloc_shared(static_cast<size_t>(ctx_.num_params) * sizeof(uint16_t));
    wire_counted_.set(ctx_.num_params * static_cast<int64_t>(sizeof(uint16_t)));
  }
  std::string name() const override { return "bf16"; }
  std::string describe() const override { return "bf16 gradients"; }
  std::optional<DType> summable_dtype() const override { return DType::BF16; }
  std::unique_ptr<BucketReduction> start(float* grads, ElemSpan span) override {
    uint16_t* w = wire_.as<uint16_t>() + span.begin;
    const KernelTable& k = kernels_for(Device::cpu());
    k.to_half(Stream::cpu(), HalfFormat::BF16, grads + span.begin, w, span.count());
    comm::Work work = ctx_.comm->allreduce(w, static_cast<size_t>(span.count()), DType::BF16,
                                           comm::ReduceOp::Avg);
    if (ctx_.watch) ctx_.watch(work);
    return reduction_of({work}, [w, g = grads + span.begin, n = span.count(), &k] {
      k.from_half(Stream::cpu(), HalfFormat::BF16, w, g, n);
    });
  }
  int64_t state_bytes() const override { return wire_counted_.bytes(); }

 private:
  CodecContext ctx_;
  comm::SharedBuffer wire_;
  ExternalBytes wire_counted_{MemCategory::CommBuffers};
};

}  // namespace

std::unique_ptr<BucketReduction> reduction_of(std::vector<comm::Work> works, std::function<void()> then) {
  return std::make_unique<WorksThen>(std::move(works), std::move(then));
}

std::unique_ptr<BucketReduction> allreduce_f32(const CodecContext& ctx, float* grads, ElemSpan span) {
  comm::Work work = ctx.comm->allreduce(grads + span.begin, static_cast<size_t>(span.count()),
                                        DType::F32, comm::ReduceOp::Avg);
  if (ctx.watch) ctx.watch(work);
  return reduction_of({work});
}

const std::vector<std::string>& compression_types() {
  static const std::vector<std::string> types = {"none", "powersgd", "topk", "sign"};
  return types;
}

std::unique_ptr<GradientCodec> make_gradient_codec(const CompressionOptions& opts, DType grad_dtype,
                                                   CodecContext ctx) {
  MT_CHECK(ctx.comm && ctx.comm->valid(), "a gradient codec needs the data-parallel communicator");
  MT_CHECK(opts.warmup_steps >= 0, "comm.compression.warmup_steps must be >= 0, got {}", opts.warmup_steps);
  if (opts.compressing())
    MT_CHECK(grad_dtype == DType::F32, "comm.compression.type = \"{}\" with comm.grad_dtype = \"{}\": "
             "the compressed codecs encode f32 gradients themselves; set comm.grad_dtype = \"f32\"",
             opts.type, dtype_name(grad_dtype));
  if (opts.type == "none") {
    MT_CHECK(grad_dtype == DType::F32 || grad_dtype == DType::BF16,
             "gradient reduction dtype must be f32 or bf16, got {}", dtype_name(grad_dtype));
    if (grad_dtype == DType::BF16) return std::make_unique<Bf16Codec>(std::move(ctx));
    return std::make_unique<F32Codec>(std::move(ctx));
  }
  if (opts.type == "powersgd") return std::make_unique<PowerSgdCodec>(opts, std::move(ctx));
  if (opts.type == "topk") return std::make_unique<TopKCodec>(opts, std::move(ctx));
  if (opts.type == "sign") return std::make_unique<SignCodec>(opts, std::move(ctx));
  throw UsageError(fmt::format("comm.compression.type = \"{}\" is not one of none, powersgd, topk, sign",
                               opts.type));
}

}  // namespace meshtrain::parallel
