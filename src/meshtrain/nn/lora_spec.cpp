#include "meshtrain/nn/lora_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/nn/lora_model.h"
#include "meshtrain/nn/model_registry.h"

namespace meshtrain {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "model.layers.0.self_attn.q_proj.weight" matches "q_proj" and
// "self_attn.q_proj" (whole dot-separated components), not "proj".
bool matches(const std::string& name, const std::string& target) {
  const std::string tail = target + ".weight";
  return name == tail || ends_with(name, "." + tail);
}

// The adaptable matrices of one block, as short names ("self_attn.q_proj").
std::vector<std::string> adaptable_names(const ParamLayout& lay) {
  std::vector<std::string> out;
  int unit = -1;
  for (const ParamInfo& p : lay.params) {
    if (!p.adaptable) continue;
    if (unit < 0) unit = p.unit;
    if (p.unit != unit) break;
    std::string n = p.name.substr(0, p.name.size() - std::string(".weight").size());
    const size_t last = n.rfind('.');
    const size_t before = last == std::string::npos ? std::string::npos : n.rfind('.', last - 1);
    out.push_back(before == std::string::npos ? n : n.substr(before + 1));
  }
  return out;
}

}  // namespace

std::vector<std::string> LoraConfig::parse_targets(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string t = list.substr(at, comma - at);
    t.erase(0, t.find_first_not_of(' '));
    t.erase(t.find_last_not_of(' ') + 1);
    MT_CHECK(!t.empty(), "lora.targets \"{}\": an empty name (expected \"all\" or names such as "
             "\"q_proj,v_proj\")", list);
    out.push_back(t);
    at = comma + 1;
  }
  return out;
}

std::shared_ptr<const LoraSpec> LoraSpec::make(std::shared_ptr<const ModelSpec> base,
                                               const LoraConfig& cfg) {
  return std::make_shared<LoraSpec>(std::move(base), cfg);
}

LoraSpec::LoraSpec(std::shared_ptr<const ModelSpec> base, const LoraConfig& cfg)
    : base_(std::move(base)), cfg_(cfg) {
  MT_CHECK(base_, "LoRA needs a base model");
  MT_CHECK(!base_->frozen_base(), "LoRA on a LoRA model: merge the first adapters before adding more");
  const ModelShard bs = base_->shard();
  MT_CHECK(bs.tp_size == 1 && !bs.sequence_parallel, "LoRA with tensor parallelism is not "
           "supported yet: use parallel.tp = 1 (data parallelism, ZeRO 1-3 and pipeline stages "
           "work with LoRA)");
  MT_CHECK(cfg_.rank >= 1 && cfg_.rank <= 4096, "lora.rank = {} must be in [1, 4096]", cfg_.rank);
  MT_CHECK(cfg_.alpha > 0, "lora.alpha = {} must be > 0", cfg_.alpha);
  MT_CHECK(!cfg_.targets.empty(), "lora.targets is empty");
  const ParamLayout& bl = base_->layout();
  const bool all = cfg_.targets.size() == 1 && cfg_.targets[0] == "all";
  std::set<std::string> used;
  auto wanted = [&](const ParamInfo& p) {
    if (!p.adaptable) return false;
    if (all) return true;
    bool hit = false;
    for (const std::string& t : cfg_.targets)
      if (matches(p.name, t)) used.insert(t), hit = true;
    return hit;
  };
  const int64_t r = cfg_.rank;
  unit_of_base_.assign(static_cast<size_t>(bl.num_units()), -1);
  int64_t at = 0;
  auto add = [&](std::string name, Shape shape, int unit) {
    ParamInfo p;
    p.name = std::move(name), p.shape = std::move(shape), p.begin = at, p.unit = unit;
    p.decay = true;  // AdamW's decay applies to the adapters as PEFT's optimizers do
    at = p.end();
    layout_.params.push_back(std::move(p));
    return layout_.params.back().begin;
  };
  for (const ParamInfo& p : bl.params) {
    if (!wanted(p)) continue;
    MT_CHECK(p.shape.size() == 2, "{}: an adaptable parameter must be a matrix", p.name);
    int& unit = unit_of_base_[static_cast<size_t>(p.unit)];
    if (unit < 0) {  // the base's units tile in order, so a unit's adapters are adjacent
      unit = layout_.num_units();
      layout_.units.push_back({bl.units[static_cast<size_t>(p.unit)].name + " adapters", at, at});
    }
    const std::string stem = p.name.substr(0, p.name.size() - std::string(".weight").size());
    Site s;
    s.name = p.name, s.w_begin = p.begin, s.rows = p.shape[0], s.cols = p.shape[1], s.unit = unit;
    s.a = add(stem + ".lora_A.weight", {r, s.cols}, unit);
    s.b = add(stem + ".lora_B.weight", {s.rows, r}, unit);
    layout_.units.back().end = at;
    sites_.push_back(std::move(s));
  }
  const std::vector<std::string> names = adaptable_names(bl);
  MT_CHECK(!sites_.empty(), "lora.targets = {}: no matrix of the {} model matches; its blocks' "
           "linear layers are {} (or \"all\")", fmt::join(cfg_.targets, ","), base_->family(),
           fmt::join(names, ", "));
  if (!all)
    for (const std::string& t : cfg_.targets)
      MT_CHECK(used.count(t), "lora.targets: \"{}\" matches no matrix of the {} model; its blocks' "
               "linear layers are {} (or \"all\")", t, base_->family(), fmt::join(names, ", "));
  layout_.numel = at;
  for (const ParamUse& e : bl.order) {
    const int u = unit_of_base_[static_cast<size_t>(e.unit)];
    if (u >= 0) layout_.order.push_back({e.need, u, e.backward});
  }
  layout_.validate();
}

size_t LoraSpec::first_site_at(int64_t w_begin) const {
  return static_cast<size_t>(
      std::lower_bound(sites_.begin(), sites_.end(), w_begin,
                       [](const Site& s, int64_t w) { return s.w_begin < w; }) -
      sites_.begin());
}

nlohmann::json LoraSpec::to_json() const {
  nlohmann::json j = {{"family", kFamily},       {"rank", cfg_.rank},
                      {"alpha", cfg_.alpha},     {"targets", cfg_.targets},
                      {"base_from", cfg_.base_from}, {"base", base_->to_json()}};
  // Only when set: a run that keeps its f32 base describes itself as before.
  if (cfg_.half_base()) j["base_dtype"] = precision_name(cfg_.base_precision);
  return j;
}

std::shared_ptr<const ModelSpec> LoraSpec::from_json(const nlohmann::json& j, const std::string& where) {
  try {
    LoraConfig c;
    c.rank = j.at("rank").get<int>();
    c.alpha = j.at("alpha").get<double>();
    c.targets = j.at("targets").get<std::vector<std::string>>();
    c.base_from = j.value("base_from", std::string());
    c.base_precision = precision_from_name(j.value("base_dtype", std::string("fp32")));
    return make(model_spec_from_json(j.at("base"), where), c);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed LoRA model description: {}", where, e.what());
  }
}

std::string LoraSpec::describe() const {
  const double pct = 100.0 * static_cast<double>(num_params()) / static_cast<double>(base_->num_params());
  return fmt::format("LoRA r{} alpha {} on {} matrices ({}): {:.2f}M trained parameters ({:.2f}% "
                     "of the base); base {}", cfg_.rank, cfg_.alpha, sites_.size(),
                     fmt::join(cfg_.targets, ","), num_params() / 1e6, pct, base_->describe());
}

std::shared_ptr<const ModelSpec> LoraSpec::sharded(const ModelShard& shard) const {
  // From a stage: the whole model's adapters first (their initial draws count from it).
  if (!base_->shard().is_full()) return make(base_->sharded(ModelShard{}), cfg_)->sharded(shard);
  if (shard.is_full()) return shared_from_this();
  auto stage = std::make_shared<LoraSpec>(base_->sharded(shard), cfg_);
  // The whole model's A draws before the stage's first adapted matrix (the
  // stage's sites are a contiguous run of the whole's, by name).
  const std::string& first = stage->sites_.front().name;
  int64_t draws = 0;
  for (const Site& s : sites_) {
    if (s.name == first) break;
    draws += static_cast<int64_t>(cfg_.rank) * s.cols;
  }
  stage->init_draws_before_ = draws;
  return stage;
}

double LoraSpec::flops_per_token(int T) const {
  return base_->flops_per_token(T) * 2.0 / 3.0 + 6.0 * static_cast<double>(num_params());
}

ModelMemory LoraSpec::adapter_memory(int64_t N, Precision precision) const {
  const int64_t r = cfg_.rank;
  int64_t max_cols = 0;
  for (const Site& s : sites_) max_cols = std::max(max_cols, s.cols);
  ModelMemory m;
  m.activations = static_cast<int64_t>(sites_.size()) * N * r * 4;  // inp A^T per site
  m.workspace = N * r * 4;                                          // its gradient
  if (is_mixed(precision)) m.workspace += (N * r + r * max_cols) * 2;  // 16-bit operands
  return m;
}

ModelMemory LoraSpec::memory(int B, int T, int nthreads, const Recompute& recompute,
                             Precision precision) const {
  ModelMemory m = base_->memory(B, T, nthreads, recompute, precision);
  const ModelMemory a = adapter_memory(static_cast<int64_t>(B) * T, precision);
  m.activations += a.activations;  // per activation slot
  m.workspace += a.workspace;
  m.shared_workspace += a.workspace;  // one scratch for every slot
  m.deferred_weights = 0;  // the frozen base queues no weight product (Model::backward_stage_input)
  m.frozen_params = base_->num_params() * (is_mixed(precision) ? 6 : 4);
  if (cfg_.half_base() && is_mixed(precision))  // the matrices' f32 values handed back
    for (const ParamInfo& p : base_->layout().params)
      if (p.half_weight) m.frozen_params -= 4 * p.numel();
  return m;
}

std::unique_ptr<Model> LoraSpec::build(ModelBuffers buffers) const {
  return std::make_unique<LoraModel>(shared_from_this(), std::move(buffers));
}

void merge_lora(const LoraSpec& spec, const float* adapters, float* merged, Device device) {
  const int64_t r = spec.config().rank;
  const float s = spec.config().scale();
  const KernelTable& k = kernels_for(device);
  for (const LoraSpec::Site& site : spec.sites())
    k.sgemm(default_stream(device), false, false, site.rows, site.cols, r, s, adapters + site.b, r, adapters + site.a,
               site.cols, 1.f, merged + site.w_begin, site.cols);
}

}  // namespace meshtrain
