#include "meshtrain/nn/gpt_params.h"

#include "meshtrain/nn/model.h"

namespace meshtrain {

GPTParams GPTParams::view(const GPTConfig& cfg, const Tensor& flat) {
  return view(GPTDims::make(cfg, {}), flat);
}

GPTParams GPTParams::view(const GPTDims& d, const Tensor& flat) {
  MT_CHECK(flat.numel() == d.num_params(), "flat buffer has {} elements, model needs {}",
           flat.numel(), d.num_params());
  const int64_t C = d.C, A = d.A, F = d.F;
  GPTParams p;
  p.flat = flat;
  int64_t off = 0;
  auto take = [&](Shape s) {
    Tensor t = flat.slice_flat(off, shape_numel(s)).reshape(s);
    off += t.numel();
    return t;
  };
  if (d.has_wte()) p.wte = take({d.Vl, C});
  if (d.embeds) p.wpe = take({d.T, C});
  p.layer0 = d.layer0;
  p.layers.resize(d.L);
  for (auto& l : p.layers) {
    l.ln1w = take({C});
    l.ln1b = take({C});
    l.qkvw = take({3 * A, C});
    l.qkvb = take({3 * A});
    l.attprojw = take({C, A});
    l.attprojb = take({C});
    l.ln2w = take({C});
    l.ln2b = take({C});
    l.fcw = take({F, C});
    l.fcb = take({F});
    l.fcprojw = take({C, F});
    l.fcprojb = take({C});
  }
  if (d.heads) {
    p.lnfw = take({C});
    p.lnfb = take({C});
  }
  MT_CHECK(off == flat.numel(), "parameter layout covers {} of {} elements", off, flat.numel());
  return p;
}

std::vector<std::pair<std::string, Tensor>> GPTParams::named() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (wte.defined()) out.emplace_back("wte.weight", wte);
  if (wpe.defined()) out.emplace_back("wpe.weight", wpe);
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    std::string h = "h." + std::to_string(layer0 + static_cast<int>(i)) + ".";
    out.emplace_back(h + "ln_1.weight", l.ln1w);
    out.emplace_back(h + "ln_1.bias", l.ln1b);
    out.emplace_back(h + "attn.c_attn.weight", l.qkvw);
    out.emplace_back(h + "attn.c_attn.bias", l.qkvb);
    out.emplace_back(h + "attn.c_proj.weight", l.attprojw);
    out.emplace_back(h + "attn.c_proj.bias", l.attprojb);
    out.emplace_back(h + "ln_2.weight", l.ln2w);
    out.emplace_back(h + "ln_2.bias", l.ln2b);
    out.emplace_back(h + "mlp.c_fc.weight", l.fcw);
    out.emplace_back(h + "mlp.c_fc.bias", l.fcb);
    out.emplace_back(h + "mlp.c_proj.weight", l.fcprojw);
    out.emplace_back(h + "mlp.c_proj.bias", l.fcprojb);
  }
  if (lnfw.defined()) {
    out.emplace_back("ln_f.weight", lnfw);
    out.emplace_back("ln_f.bias", lnfb);
  }
  return out;
}

std::pair<int64_t, int64_t> GPTParams::layer_range(int l) const {
  const auto& L = layers.at(l);
  int64_t begin = L.ln1w.offset() - flat.offset();
  int64_t end = L.fcprojb.offset() - flat.offset() + L.fcprojb.numel();
  return {begin, end};
}

std::pair<int64_t, int64_t> GPTParams::unit_range(int unit) const {
  const int L = static_cast<int>(layers.size());
  const int first = wte.defined() ? 1 : 0;  // unit of layer 0
  const int units = first + L + (lnfw.defined() ? 1 : 0);
  MT_CHECK(unit >= 0 && unit < units, "parameter unit {} is outside [0, {})", unit, units);
  if (unit < first) return {0, layer_range(0).first};
  if (unit < first + L) return layer_range(unit - first);
  return {layer_range(L - 1).second, flat.numel()};
}

}  // namespace meshtrain
