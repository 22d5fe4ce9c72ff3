// Data parallelism: every rank holds the whole model, trains on its slice of
// each global batch, and the gradients are averaged across ranks before the
// optimizer, so N ranks with micro-batch b compute the step one rank would
// with batch N*b.
//
//   DataParallel dp(comm, spec.num_params());
//   auto model = spec.build({Tensor(), dp.gradient_buffer()});  // gradients in shared memory
//   dp.attach(*model);                      // installs the grad-ready hook
//   dp.broadcast_parameters();              // rank 0's initial weights
//   per step: for each micro-batch: forward; dp.begin_backward(last); backward;
//             dp.end_backward(last)         // last: every bucket reduced (averaged)
//
// It is the "replicated" GradientSync (parallel/gradient_sync.h).
//
// Buckets (bucket_plan.h) are launched from the model's grad-ready hook during
// the last micro-batch's backward, the moment backward has finished writing
// them, so the allreduce of layer L-1 runs while layers L-2..0 are still in
// backward. Earlier micro-batches only accumulate (no communication).
// Averaging is ReduceOp::Avg. With a world of one rank nothing communicates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "meshtrain/comm/communicator.h"
#include "meshtrain/core/memory.h"
#include "meshtrain/parallel/bucket_plan.h"
#include "meshtrain/parallel/completion_clock.h"
#include "meshtrain/parallel/gradient_codec.h"
#include "meshtrain/parallel/gradient_sync.h"

namespace meshtrain::parallel {

struct DataParallelOptions {
  size_t bucket_bytes = 25u << 20;      // PyTorch DDP's default bucket_cap_mb
  size_t first_bucket_bytes = 1u << 20;  // small, so the first reduction starts early
  // Check after the broadcast (and on request) that every rank holds the same
  // parameters (checksum). Default: MESHTRAIN_DEBUG or MESHTRAIN_COMM_DEBUG set.
  bool verify = false;
  // Wire format of the gradient reduction (config comm.grad_dtype): F32, or
  // BF16 = each bucket rounded into a shared bf16 buffer, reduced there, and
  // widened back into the f32 gradients when it completes.
  DType grad_dtype = DType::F32;
  // Lossy compression of the gradients (config comm.compression;
  // gradient_codec.h): type "none" sends grad_dtype.
  CompressionOptions compression;
  static DataParallelOptions from_env();
};

class DataParallel final : public GradientSync {
 public:
  // `layout` (optional, read only here): where tensors begin and their
  // shapes, for a codec that factors matrices (buckets then end on tensor
  // boundaries).
  DataParallel(comm::Communicator comm, int64_t num_params, DataParallelOptions opts = {},
               const ParamLayout* layout = nullptr);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  comm::Communicator* comm() override { return &comm_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const GradientCodec& codec() const { return *codec_; }

  // num_params f32 in the transport's shared memory: build the model on it
  // (ModelBuffers::grads) so bucket allreduces skip the copy-in.
  Tensor gradient_buffer() const;
  // Installs the model's grad-ready hook. The model lives on this object's
  // gradient buffer, so it is normally destroyed first; the destructor never
  // touches it (it may be gone). A model that outlives this object must be
  // detach()ed first (its hook would call into a destroyed object).
  void attach(Model& model) override;
  // Removes the hook from the attached model (which must still be alive).
  void detach() override;
  // Rank 0's parameters to every rank (verified when options().verify).
  void broadcast_parameters();
  // Throws unless every rank's parameters have the same checksum.
  void verify_parameters_equal();

  // GradientSync. begin_backward: reductions launch only during the last
  // micro-batch's backward; end_backward(last) calls finish_gradients().
  std::string name() const override { return "replicated"; }
  std::string describe() const override;
  void after_resume() override { broadcast_parameters(); }
  void set_gradient_scale(float scale) override { codec_->set_gradient_scale(scale); }
  void update_skipped() override { codec_->discard_feedback(); }
  SyncState checkpoint_state() override { return codec_->checkpoint_state(); }
  void restore_counters(const nlohmann::json& j) override { codec_->restore_counters(j); }
  void verify_replicas() override { verify_parameters_equal(); }
  void zero_grad() override;
  void begin_backward(bool last_micro_batch) override;
  double end_backward(bool last_micro_batch) override;
  float* gradients() override;
  ElemSpan update_range() const override { return {0, num_params_}; }
  bool sharded() const override { return false; }
  // After the last backward: launches any bucket backward did not report and
  // waits for all of them. The model's gradients are then the average over ranks.
  void finish_gradients();
  const CommTiming& timing() const override { return timing_; }

  // The mean of `value` over ranks, and whether `value` is true on every rank:
  // decisions that change the collective sequence come from these.
  double average(double value);
  bool all(bool value);

 private:
  void on_grad_ready(int64_t begin, int64_t end);
  void launch_through(int64_t frontier);
  void watch(const comm::Work& work);

  comm::Communicator comm_;
  DataParallelOptions opts_;
  int64_t num_params_;
  comm::SharedBuffer shared_grads_;
  ExternalBytes grads_counted_{MemCategory::Gradients};  // the shared buffer, for the report
  std::unique_ptr<GradientCodec> codec_;
  Model* model_ = nullptr;
  std::vector<Bucket> buckets_;
  std::vector<std::unique_ptr<BucketReduction>> reductions_;  // this step's, in launch order
  std::vector<comm::Work> works_;  // every collective they launched, in order
  comm::CommCounters counted_at_begin_;
  std::vector<double> launched_at_;
  size_t next_bucket_ = 0;
  size_t before_last_report_ = 0;  // next_bucket_ when the latest grad-ready report came
  int64_t frontier_ = 0;  // [frontier_, num_params) is final for this step
  bool armed_ = false;
  double backward_start_ = 0;
  CommTiming timing_;
  std::unique_ptr<CompletionClock> clock_;
};

}  // namespace meshtrain::parallel
