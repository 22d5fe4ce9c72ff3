#include "meshtrain/parallel/make_gradient_sync.h"

#include <fmt/format.h>

#include "meshtrain/core/error.h"
#include "meshtrain/parallel/zero.h"

namespace meshtrain::parallel {

SyncedModel::~SyncedModel() {
  if (sync && model) sync->detach();
  model.reset();  // before the buffers the strategy owns
  sync.reset();
}

SyncedModel& SyncedModel::operator=(SyncedModel&& o) noexcept {
  if (this == &o) return *this;
  if (sync && model) sync->detach();
  model.reset();
  sync.reset();
  sync = std::move(o.sync);
  model = std::move(o.model);
  return *this;
}

SyncedModel make_synced_model(const comm::Communicator& dp_comm,
                              std::shared_ptr<const ModelSpec> spec,
                              const GradientSyncOptions& opt) {
  MT_CHECK(spec, "no model to build");
  MT_CHECK(opt.zero_stage >= 0 && opt.zero_stage <= 3, "zero.stage must be 0, 1, 2 or 3, got {}",
           opt.zero_stage);
  SyncedModel out;
  const bool several = dp_comm.valid() && dp_comm.size() > 1;
  MT_CHECK(!several || opt.device.is_cpu(), "device = \"{}\" with {} data-parallel ranks: "
           "gradient synchronization of device memory is not available yet; train on one rank "
           "(--nproc 1) or on the CPU", opt.device.str(), dp_comm.size());
  MT_CHECK(opt.device.is_cpu() || !spec->frozen_base(), "device = \"{}\": LoRA keeps its frozen "
           "base in host memory; LoRA trains on the CPU for now", opt.device.str());
  if (several && opt.parameter_server.enabled) {
    MT_CHECK(opt.zero_stage == 0 && !opt.local_sgd.enabled() && !opt.dp.compression.compressing(),
             "parallel.parameter_server with {}: the parameter server already shards the parameters "
             "and optimizer state over the ranks, and workers push whole f32 gradients; turn the "
             "other off", opt.zero_stage > 0 ? fmt::format("zero.stage = {}", opt.zero_stage)
                          : opt.local_sgd.enabled() ? std::string("parallel.local_sgd")
                                                    : std::string("comm.compression"));
    out.model = spec->build({});
    out.sync = std::make_unique<ParameterServer>(dp_comm, opt.parameter_server, opt.optimizer);
  } else if (several && opt.local_sgd.enabled()) {
    MT_CHECK(opt.zero_stage == 0, "parallel.local_sgd with zero.stage = {}: local SGD needs every "
             "rank's own replica of the model and optimizer state, which ZeRO shards; use zero.stage 0",
             opt.zero_stage);
    MT_CHECK(!opt.dp.compression.compressing(), "parallel.local_sgd with comm.compression.type = \"{}\": "
             "local SGD sends no gradients to compress (it averages the parameters every {} steps)",
             opt.dp.compression.type, opt.local_sgd.sync_every);
    out.model = spec->build({});
    out.sync = std::make_unique<LocalSgd>(dp_comm, opt.local_sgd);
  } else if (several && opt.zero_stage > 0) {
    ZeroOptions zo;
    zo.stage = opt.zero_stage;
    zo.persist_threshold = opt.persist_threshold;
    zo.dp = opt.dp;
    zo.precision = opt.precision;  // mixed precision: the 16-bit copy is what ZeRO gathers
    zo.own_range_init = opt.setup_writes_ranges;
    auto zero = std::make_unique<Zero>(dp_comm, spec, zo);
    out.model = zero->make_model();
    out.sync = std::move(zero);
  } else if (several) {
    auto dp = std::make_unique<DataParallel>(dp_comm, spec->num_params(), opt.dp, &spec->layout());
    out.model = spec->build({Tensor(), dp->gradient_buffer(), true});
    out.sync = std::move(dp);
  } else {
    ModelBuffers on;  // empty on the CPU: the model allocates its own
    if (!opt.device.is_cpu()) {
      const int64_t n = spec->num_params();
      on.params = Tensor::zeros({n}, DType::F32, MemCategory::Parameters, opt.device);
      on.grads = Tensor::zeros({n}, DType::F32, MemCategory::Gradients, opt.device);
    }
    out.model = spec->build(on);
    out.sync = std::make_unique<LocalGradients>();
  }
  out.sync->attach(*out.model);
  return out;
}

}  // namespace meshtrain::parallel
