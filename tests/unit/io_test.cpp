// Model file formats: safetensors reading/writing and validation, and the GPT
// model files (meshtrain, Hugging Face GPT-2, llm.c).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "meshtrain/core/half.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/safetensors.h"
#include "test_paths.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

// Suite "io": each test gets its own temporary directory.
class io : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("meshtrain_io_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a literal JSON header and data bytes.
void write_raw_safetensors(const std::string& path, const std::string& header,
                           const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  spit(path, bytes + header + data);
}

// Expects open() to throw an Error whose message names the file and contains `problem`.
void expect_open_error(const std::string& path, const std::string& problem) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "opening " << path << " succeeded; expected an error about: " << problem;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos) << "message: " << msg;
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::zeros(shape, dtype);
  Rng rng(seed);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng.next_u32());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Parameters of cfg filled with N(0,1) values (padded vocabulary rows zero).
GPTParams random_params(const GPTConfig& cfg, uint64_t seed) {
  Tensor flat = Tensor::zeros({cfg.num_params()});
  Rng rng(seed);
  float* p = flat.data<float>();
  for (int64_t i = 0; i < flat.numel(); ++i) p[i] = rng.normal();
  GPTParams params = GPTParams::view(cfg, flat);
  const int64_t real = int64_t{cfg.vocab_size} * cfg.n_embd;
  params.wte.slice_flat(real, params.wte.numel() - real).zero_();
  return params;
}

GPTParams zero_params(const GPTConfig& cfg) {
  return GPTParams::view(cfg, Tensor::zeros({cfg.num_params()}));
}

GPTConfig small_config() {
  GPTConfig c = gpt_preset("tiny");  // L=2 H=2 C=16 T=16 V=61 (padded 64)
  return c;
}

}  // namespace

TEST_F(io, safetensors_roundtrip_all_dtypes_and_shapes) {
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", random_tensor({2, 3}, DType::F32, 1)},  {"bf16", random_tensor({5}, DType::BF16, 2)},
      {"f16", random_tensor({1, 2, 2}, DType::F16, 3)}, {"i32", random_tensor({4}, DType::I32, 4)},
      {"u16", random_tensor({3, 1}, DType::U16, 5)},  {"f64", random_tensor({2}, DType::F64, 6)},
      {"i64", random_tensor({1}, DType::I64, 7)},     {"u8", random_tensor({7}, DType::U8, 8)},
      {"scalar", random_tensor({}, DType::F32, 9)},   {"empty", Tensor::zeros({0, 4})},
  };
  const std::string path = file("a.safetensors");
  write_safetensors(path, tensors, {{"step", "12"}, {"note", "hello"}});

  // The header is space-padded so the data section starts 8-byte aligned.
  std::string bytes = slurp(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("step"), "12");
  EXPECT_EQ(f.metadata().at("note"), "hello");
  ASSERT_EQ(f.names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (t.numel() > 0) {
      EXPECT_EQ(f.names()[i], name);  // data order
    }
    const auto& info = f.info(name);
    EXPECT_EQ(info.dtype, t.dtype()) << name;
    EXPECT_EQ(info.shape, t.shape()) << name;
    Tensor back = f.read(name);
    EXPECT_EQ(back.shape(), t.shape()) << name;
    EXPECT_TRUE(same_bytes(back, t)) << name;
  }
  // Ranged read of elements [2, 5) of the bf16 tensor.
  uint16_t part[3];
  f.read_range("bf16", 2, 3, part);
  EXPECT_EQ(std::memcmp(part, tensors[1].second.data<uint16_t>() + 2, 6), 0);
  EXPECT_THROW(f.read_range("bf16", 4, 2, part), Error);
  EXPECT_THROW(f.info("nope"), Error);
  // No temporary file is left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(io, safetensors_read_into_converts_and_checks_shape) {
  Tensor src = Tensor::zeros({2, 2});
  float vals[4] = {1.0f, -2.5f, 0.1f, 3.0e5f};
  std::memcpy(src.raw(), vals, sizeof vals);
  const std::string path = file("b.safetensors");
  write_safetensors(path, {{"x", src}});
  auto f = SafetensorsFile::open(path);
  Tensor bf = Tensor::zeros({2, 2}, DType::BF16);
  f.read_into("x", bf);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bf.data<uint16_t>()[i], f32_to_bf16(vals[i]));
  std::string msg = error_of([&] { f.read_into("x", Tensor::zeros({4})); });
  EXPECT_NE(msg.find("shape (2, 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST_F(io, safetensors_overwrite_replaces_file) {
  const std::string path = file("c.safetensors");
  write_safetensors(path, {{"a", random_tensor({100}, DType::F32, 1)}});
  write_safetensors(path, {{"b", random_tensor({3}, DType::F32, 2)}});
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f.names().size(), 1u);
  EXPECT_EQ(f.names()[0], "b");
  EXPECT_THROW(write_safetensors(path, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}),
               Error);
}

TEST_F(io, safetensors_truncated_files_are_errors) {
  const std::string good = file("good.safetensors");
  write_safetensors(good, {{"w", random_tensor({8, 8}, DType::F32, 1)},
                           {"b", random_tensor({8}, DType::F32, 2)}});
  const std::string bytes = slurp(good);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  const size_t header_end = 8 + n;
  struct Cut {
    size_t at;
    const char* problem;
  };
  for (Cut c : {Cut{0, "shorter than the 8-byte header length"}, Cut{5, "shorter than the 8-byte"},
                Cut{8, "header length"}, Cut{header_end - 1, "header length"},
                Cut{header_end, "truncated"}, Cut{header_end + 4, "truncated"},
                Cut{bytes.size() - 1, "truncated"}}) {
    const std::string path = file("cut" + std::to_string(c.at) + ".safetensors");
    spit(path, bytes.substr(0, c.at));
    SCOPED_TRACE("cut at " + std::to_string(c.at));
    expect_open_error(path, c.problem);
  }
}

TEST_F(io, safetensors_bad_header_length_and_json_are_errors) {
  const std::string good = file("good.safetensors");
  write_safetensors(good, {{"w", random_tensor({4, 4}, DType::F32, 1)}});
  const std::string bytes = slurp(good);

  std::string huge = bytes;
  huge[5] = 0x7f;  // header length near 2^47
  spit(file("huge.safetensors"), huge);
  expect_open_error(file("huge.safetensors"), "header length");

  std::string short_len = bytes;  // header length that cuts the JSON short
  uint64_t ten = 10;
  std::memcpy(short_len.data(), &ten, 8);
  spit(file("short.safetensors"), short_len);
  expect_open_error(file("short.safetensors"), "not valid JSON");

  std::string corrupt = bytes;
  corrupt[8 + 3] = '}';  // breaks the first key
  spit(file("corrupt.safetensors"), corrupt);
  expect_open_error(file("corrupt.safetensors"), "not valid JSON");

  write_raw_safetensors(file("array.safetensors"), "[1, 2]", "");
  expect_open_error(file("array.safetensors"), "not a JSON object");
}

TEST_F(io, safetensors_bad_entries_are_errors) {
  const std::string data(32, '\0');
  struct Case {
    const char* name;
    std::string header;
    const char* problem;
  };
  std::vector<Case> cases = {
      {"dtype", R"({"x": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})",
       "unknown dtype 'F33'"},
      {"size", R"({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
       "spans 8 bytes but shape (3) of F32 needs 12"},
      {"order", R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})",
       "end before begin"},
      {"range", R"({"x": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}})",
       "truncated: tensor 'x'"},
      {"overlap",
       R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
           "y": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
       "overlap"},
      {"negative", R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
       "not a non-negative integer"},
      {"offsets", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
       "data_offsets"},
      {"metadata", R"({"__metadata__": {"a": 1}})", "__metadata__ value 'a' is not a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = file(std::string(c.name) + ".safetensors");
    write_raw_safetensors(path, c.header, data);
    expect_open_error(path, c.problem);
  }
  // Known safetensors dtypes that meshtrain cannot hold are listed but not readable.
  const std::string path = file("bool.safetensors");
  write_raw_safetensors(path, R"({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})",
                        data);
  auto f = SafetensorsFile::open(path);
  EXPECT_FALSE(f.info("m").supported);
  EXPECT_THROW(f.read("m"), Error);
}

TEST_F(io, reads_file_written_by_safetensors_library) {
  // Written by safetensors.torch.save_file (tools/make_gpt_fixture.py).
  const std::string path =
      std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/safetensors_library_sample.safetensors";
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("written_by"), "safetensors.torch.save_file");
  EXPECT_EQ(f.names().size(), 7u);
  Tensor f32 = f.read("f32");
  EXPECT_EQ(f32.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f32.data<float>()[i], 0.5f * i);
  Tensor bf = f.read("bf16");
  EXPECT_EQ(bf.dtype(), DType::BF16);
  EXPECT_EQ(bf16_to_f32(bf.data<uint16_t>()[1]), -2.0f);
  Tensor h = f.read("f16");
  EXPECT_EQ(h.shape(), (Shape{2, 1}));
  EXPECT_EQ(f16_to_f32(h.data<uint16_t>()[1]), -0.25f);
  EXPECT_EQ(f.read("i32").data<int32_t>()[0], -7);
  EXPECT_EQ(f.read("i64").data<int64_t>()[0], int64_t{1} << 40);
  EXPECT_EQ(f.read("u8").data<uint8_t>()[0], 255);
  EXPECT_EQ(f.read("f64").data<double>()[0], 1.0 / 3.0);
  // Float conversion on read: bf16 values into f32.
  Tensor conv = Tensor::zeros({3});
  f.read_into("bf16", conv);
  EXPECT_EQ(conv.data<float>()[2], 0.5f);
}

TEST_F(io, meshtrain_format_roundtrip_is_bit_exact) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 7);
  const std::string path = file("model.safetensors");
  save_gpt_safetensors(path, src, cfg);
  EXPECT_EQ(detect_model_file_format(path), ModelFileFormat::Meshtrain);
  GPTConfig back = read_gpt_config(path);
  EXPECT_EQ(back.n_layer, cfg.n_layer);
  EXPECT_EQ(back.n_head, cfg.n_head);
  EXPECT_EQ(back.n_embd, cfg.n_embd);
  EXPECT_EQ(back.seq_len, cfg.seq_len);
  EXPECT_EQ(back.vocab_size, cfg.vocab_size);
  EXPECT_EQ(back.padded_vocab, cfg.padded_vocab);
  GPTParams dst = zero_params(cfg);
  load_gpt_weights(path, dst, cfg);
  EXPECT_TRUE(same_bytes(dst.flat, src.flat));
  // The file uses our names, in f32, with our (out, in) layout.
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.info("h.0.mlp.c_fc.weight").shape, (Shape{4 * 16, 16}));
  EXPECT_EQ(f.info("wte.weight").shape, (Shape{64, 16}));
  // A head count that contradicts the file is refused.
  EXPECT_THROW(read_gpt_config(path, 4), Error);
}

TEST_F(io, loads_bf16_params_buffer_with_conversion) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 8);
  const std::string path = file("model.safetensors");
  save_gpt_safetensors(path, src, cfg);
  GPTParams dst = GPTParams::view(cfg, Tensor::zeros({cfg.num_params()}, DType::BF16));
  load_gpt_weights(path, dst, cfg);
  const float* s = src.flat.data<float>();
  const uint16_t* d = dst.flat.data<uint16_t>();
  for (int64_t i = 0; i < cfg.num_params(); ++i) ASSERT_EQ(d[i], f32_to_bf16(s[i])) << i;
}

TEST_F(io, llmc_roundtrip_is_bit_exact_and_tensor_major) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 9);
  const std::string path = file("gpt2_tiny.bin");
  write_llmc_model(path, src, cfg);
  EXPECT_EQ(detect_model_file_format(path), ModelFileFormat::LlmC);

  const std::string bytes = slurp(path);
  const int64_t C = 16, L = 2, T = 16, Vp = 64;
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), 1024 + 4 * cfg.num_params());
  int32_t hdr[8];
  std::memcpy(hdr, bytes.data(), sizeof hdr);
  EXPECT_EQ(hdr[0], 20240326);
  EXPECT_EQ(hdr[1], 3);
  EXPECT_EQ(hdr[2], T);
  EXPECT_EQ(hdr[3], 61);
  EXPECT_EQ(hdr[4], L);
  EXPECT_EQ(hdr[5], 2);
  EXPECT_EQ(hdr[6], C);
  EXPECT_EQ(hdr[7], Vp);
  // llm.c order: wte, wpe, ln1w (L,C), ln1b (L,C), qkvw (L,3C,C): layer 1's qkvw
  // follows layer 0's.
  const int64_t qkvw1 = Vp * C + T * C + 2 * L * C + 3 * C * C;
  EXPECT_EQ(std::memcmp(bytes.data() + 1024 + 4 * qkvw1, src.layers[1].qkvw.raw(),
                        src.layers[1].qkvw.nbytes()),
            0);
  // ln_f comes last.
  EXPECT_EQ(std::memcmp(bytes.data() + bytes.size() - 4 * C, src.lnfb.raw(), 4 * C), 0);

  GPTConfig back = read_gpt_config(path);
  EXPECT_EQ(back.n_layer, 2);
  EXPECT_EQ(back.n_head, 2);
  EXPECT_EQ(back.n_embd, 16);
  EXPECT_EQ(back.seq_len, 16);
  EXPECT_EQ(back.vocab_size, 61);
  EXPECT_EQ(back.padded_vocab, 64);
  GPTParams dst = zero_params(cfg);
  load_gpt_weights(path, dst, cfg);
  EXPECT_TRUE(same_bytes(dst.flat, src.flat));
}

TEST_F(io, llmc_bf16_version5_and_bad_files) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 10);
  const std::string f32path = file("f32.bin");
  write_llmc_model(f32path, src, cfg);
  // Version 5 stores the same tensors as bf16.
  std::string bytes = slurp(f32path);
  std::string v5 = bytes.substr(0, 1024);
  int32_t five = 5;
  std::memcpy(v5.data() + 4, &five, 4);
  for (size_t i = 1024; i < bytes.size(); i += 4) {
    float x;
    std::memcpy(&x, bytes.data() + i, 4);
    uint16_t h = f32_to_bf16(x);
    v5.append(reinterpret_cast<const char*>(&h), 2);
  }
  spit(file("bf16.bin"), v5);
  GPTParams dst = zero_params(cfg);
  load_gpt_weights(file("bf16.bin"), dst, cfg);
  for (int64_t i = 0; i < cfg.num_params(); ++i)
    ASSERT_EQ(dst.flat.data<float>()[i], bf16_to_f32(f32_to_bf16(src.flat.data<float>()[i])));

  spit(file("cut.bin"), bytes.substr(0, bytes.size() - 10));
  std::string msg = error_of([&] { read_gpt_config(file("cut.bin")); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(file("cut.bin")), std::string::npos) << msg;

  std::string v4 = bytes;
  int32_t four = 4;
  std::memcpy(v4.data() + 4, &four, 4);
  spit(file("v4.bin"), v4);
  msg = error_of([&] { read_gpt_config(file("v4.bin")); });
  EXPECT_NE(msg.find("version 4"), std::string::npos) << msg;

  // A file for another shape is refused by field name.
  GPTConfig other = cfg;
  other.n_layer = 3;
  msg = error_of([&] {
    GPTParams p = zero_params(other);
    load_gpt_weights(f32path, p, other);
  });
  EXPECT_NE(msg.find("n_layer=2 but the config needs 3"), std::string::npos) << msg;
}

TEST_F(io, hf_export_import_roundtrip_is_bit_exact) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 11);
  const std::string path = file("model.safetensors");
  export_hf_gpt2(path, src, cfg);
  EXPECT_EQ(detect_model_file_format(path), ModelFileFormat::HuggingFace);

  // Hugging Face layout: V rows of wte, Conv1D weights transposed to (in, out).
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.info("wte.weight").shape, (Shape{61, 16}));
  EXPECT_EQ(f.info("h.1.attn.c_attn.weight").shape, (Shape{16, 48}));
  EXPECT_EQ(f.info("h.1.mlp.c_proj.weight").shape, (Shape{64, 16}));
  EXPECT_EQ(f.info("h.1.attn.c_attn.bias").shape, (Shape{48}));
  Tensor qkv = f.read("h.1.attn.c_attn.weight");
  const float* ours = src.layers[1].qkvw.data<float>();  // (3C, C)
  for (int in = 0; in < 16; ++in)
    for (int out = 0; out < 48; ++out)
      ASSERT_EQ(qkv.data<float>()[in * 48 + out], ours[out * 16 + in]);

  GPTConfig back = read_gpt_config(path);
  EXPECT_EQ(back.n_layer, 2);
  EXPECT_EQ(back.n_head, 2);  // from the metadata we write
  EXPECT_EQ(back.vocab_size, 61);
  EXPECT_EQ(back.padded_vocab, 64);
  GPTParams dst = random_params(cfg, 12);  // padded rows must come back zero
  load_gpt_weights(path, dst, cfg);
  EXPECT_TRUE(same_bytes(dst.flat, src.flat));
}

// A file shaped like transformers' GPT2LMHeadModel.state_dict(): "transformer."
// prefix, causal-mask buffers, a tied lm_head, f16 weights, no n_head.
TEST_F(io, hf_import_accepts_prefix_buffers_tied_head_and_f16) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 13);
  const std::string exported = file("plain.safetensors");
  export_hf_gpt2(exported, src, cfg);
  auto f = SafetensorsFile::open(exported);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& name : f.names()) {
    Tensor t = f.read(name);
    Tensor h = Tensor::zeros(t.shape(), DType::F16);
    h.copy_from(t);
    tensors.emplace_back("transformer." + name, h);
    if (name == "wte.weight") tensors.emplace_back("lm_head.weight", h);
  }
  for (int l = 0; l < cfg.n_layer; ++l) {
    tensors.emplace_back("transformer.h." + std::to_string(l) + ".attn.bias",
                         Tensor::zeros({1, 1, 16, 16}));
    tensors.emplace_back("transformer.h." + std::to_string(l) + ".attn.masked_bias",
                         Tensor::zeros({}));
  }
  const std::string path = file("hf.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});

  // n_embd=16 is no GPT-2 size, so the head count must be given.
  std::string msg = error_of([&] { read_gpt_config(path); });
  EXPECT_NE(msg.find("model.n_head"), std::string::npos) << msg;
  GPTConfig back = read_gpt_config(path, 2);
  EXPECT_EQ(back.n_layer, 2);
  EXPECT_EQ(back.n_embd, 16);

  GPTParams dst = zero_params(cfg);
  load_gpt_weights(path, dst, cfg);
  for (int64_t i = 0; i < cfg.num_params(); ++i)
    ASSERT_EQ(dst.flat.data<float>()[i], f16_to_f32(f32_to_f16(src.flat.data<float>()[i]))) << i;

  // An untied output head would be silently dropped, so it is refused.
  Tensor other = Tensor::zeros({61, 16}, DType::F16);
  for (auto& [name, t] : tensors)
    if (name == "lm_head.weight") t = other;
  write_safetensors(path, tensors, {{"format", "pt"}});
  msg = error_of([&] { load_gpt_weights(path, dst, cfg); });
  EXPECT_NE(msg.find("lm_head.weight differs"), std::string::npos) << msg;
}

TEST_F(io, hf_config_uses_known_gpt2_head_counts) {
  // Config inference reads only names and shapes, so a partial file will do.
  const std::string path = file("gpt2ish.safetensors");
  write_safetensors(path, {{"wte.weight", Tensor::zeros({3, 768})},
                           {"wpe.weight", Tensor::zeros({5, 768})},
                           {"h.0.ln_1.weight", Tensor::zeros({768})},
                           {"h.1.ln_1.weight", Tensor::zeros({768})}});
  GPTConfig c = read_gpt_config(path);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.seq_len, 5);
  EXPECT_EQ(c.vocab_size, 3);
  EXPECT_EQ(read_gpt_config(path, 6).n_head, 6);  // a caller's value wins when the file has none

  write_safetensors(path, {{"foo", Tensor::zeros({3})}});
  std::string msg = error_of([&] { read_gpt_config(path); });
  EXPECT_NE(msg.find("no wte.weight"), std::string::npos) << msg;
}

TEST_F(io, shape_mismatch_missing_and_extra_tensors_are_named) {
  const GPTConfig cfg = small_config();
  GPTParams src = random_params(cfg, 14);
  const std::string good = file("good.safetensors");
  save_gpt_safetensors(good, src, cfg);
  auto f = SafetensorsFile::open(good);
  auto rewrite = [&](const std::string& path, auto edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& name : f.names()) tensors.emplace_back(name, f.read(name));
    edit(tensors);
    write_safetensors(path, tensors, f.metadata());
  };
  auto load_error = [&](const std::string& path) {
    return error_of([&] {
      GPTParams dst = zero_params(cfg);
      load_gpt_weights(path, dst, cfg);
    });
  };

  const std::string bad_shape = file("bad_shape.safetensors");
  rewrite(bad_shape, [](auto& ts) {
    for (auto& [name, t] : ts)
      if (name == "h.1.mlp.c_fc.weight") t = Tensor::zeros({64, 8});
  });
  std::string msg = load_error(bad_shape);
  EXPECT_NE(msg.find("model file " + bad_shape + ": h.1.mlp.c_fc.weight has shape (64, 8) but the "
                     "config needs (64, 16)"),
            std::string::npos)
      << msg;

  const std::string missing = file("missing.safetensors");
  rewrite(missing, [](auto& ts) {
    std::erase_if(ts, [](const auto& p) { return p.first == "h.0.ln_2.bias"; });
  });
  msg = load_error(missing);
  EXPECT_NE(msg.find("h.0.ln_2.bias is missing"), std::string::npos) << msg;

  const std::string extra = file("extra.safetensors");
  rewrite(extra, [](auto& ts) { ts.emplace_back("h.2.ln_1.weight", Tensor::zeros({16})); });
  msg = load_error(extra);
  EXPECT_NE(msg.find("unexpected tensor h.2.ln_1.weight"), std::string::npos) << msg;

  // Hugging Face files get the same checks, with shapes in their (in, out) layout.
  const std::string hf = file("hf.safetensors");
  export_hf_gpt2(hf, src, cfg);
  GPTConfig wider = cfg;
  wider.n_embd = 32;
  msg = error_of([&] {
    GPTParams dst = zero_params(wider);
    load_gpt_weights(hf, dst, wider);
  });
  EXPECT_NE(msg.find("wte.weight has shape (61, 16) but the config needs (61, 32)"),
            std::string::npos)
      << msg;
}
