#include "meshtrain/io/model_file_util.h"

#include <charconv>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::io_detail {

void check_shape(const std::string& path, const std::string& name, const Shape& found,
                 const Shape& expected) {
  if (found != expected)
    fail("model file {}: {} has shape {} but the config needs {}", path, name, shape_str(found),
         shape_str(expected));
}

static void check_float(const SafetensorsFile& f, const std::string& name) {
  const auto& in = f.info(name);
  MT_CHECK(in.supported && (in.dtype == DType::F32 || in.dtype == DType::BF16 ||
                            in.dtype == DType::F16),
           "model file {}: {} has dtype {}; weights must be F32, BF16 or F16", f.path(), name,
           in.dtype_name);
}

Tensor read_f32(const SafetensorsFile& f, const std::string& name) {
  check_float(f, name);
  Tensor out = Tensor::zeros(f.info(name).shape, DType::F32);
  f.read_into(name, out);
  return out;
}

void read_weight_into(const SafetensorsFile& f, const std::string& name, const Tensor& dst) {
  check_float(f, name);
  f.read_into(name, dst);
}

Tensor transpose2d(const Tensor& src) {
  MT_CHECK(src.ndim() == 2 && src.dtype() == DType::F32, "transpose2d needs a 2-D f32 tensor");
  const int64_t R = src.dim(0), C = src.dim(1);
  Tensor out = Tensor::zeros({C, R}, DType::F32);
  const float* s = src.data<float>();
  float* d = out.data<float>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) d[c * R + r] = s[r * C + c];
  return out;
}

void copy_vocab_rows(const Tensor& src, const Tensor& dst, int vocab_size) {
  MT_CHECK(src.ndim() == 2 && dst.ndim() == 2 && src.dim(1) == dst.dim(1) &&
               src.dim(0) >= vocab_size && dst.dim(0) >= vocab_size,
           "vocabulary copy from {} into {} for {} tokens", shape_str(src.shape()),
           shape_str(dst.shape()), vocab_size);
  const int64_t n = int64_t{vocab_size} * dst.dim(1);
  dst.slice_flat(0, n).copy_from(src.slice_flat(0, n));
  dst.slice_flat(n, dst.numel() - n).zero_();
}

Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::F32) return t;
  Tensor out = Tensor::zeros(t.shape(), DType::F32);
  out.copy_from(t);
  return out;
}

std::map<std::string, std::string> config_metadata(const GPTConfig& cfg) {
  return {{"n_layer", std::to_string(cfg.n_layer)},   {"n_head", std::to_string(cfg.n_head)},
          {"n_embd", std::to_string(cfg.n_embd)},     {"seq_len", std::to_string(cfg.seq_len)},
          {"vocab_size", std::to_string(cfg.vocab_size)},
          {"padded_vocab", std::to_string(cfg.padded_vocab)}};
}

int metadata_int(const std::string& path, const std::map<std::string, std::string>& meta,
                 const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end()) return -1;
  const std::string& s = it->second;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  MT_CHECK(ec == std::errc() && end == s.data() + s.size() && v >= 0,
           "model file {}: metadata {} = '{}' is not a non-negative integer", path, key, s);
  return v;
}

void check_same_config(const std::string& path, const GPTConfig& f, const GPTConfig& w,
                       bool check_padded_vocab) {
  auto same = [&](const char* field, int found, int want) {
    MT_CHECK(found == want, "model file {} has {}={} but the config needs {}", path, field, found,
             want);
  };
  same("n_layer", f.n_layer, w.n_layer);
  same("n_head", f.n_head, w.n_head);
  same("n_embd", f.n_embd, w.n_embd);
  same("seq_len", f.seq_len, w.seq_len);
  same("vocab_size", f.vocab_size, w.vocab_size);
  if (check_padded_vocab) same("padded_vocab", f.padded_vocab, w.padded_vocab);
}

}  // namespace meshtrain::io_detail
