// init_from read by range (ckpt::load_init_weights with a range, how ZeRO
// ranks load only their own part): for every source that can be read so (a
// Hugging Face Llama folder, f32 or sharded bf16; a model file meshtrain
// wrote, Llama's or GPT's; a Hugging Face GPT-2 file; a checkpoint
// directory), any range and tp shard gets exactly the values a whole load
// puts there, and nothing outside it is written. llm.c files load whole
// only, and asking them for a range is a clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <vector>

#include "error_of.h"
#include "meshtrain/ckpt/model_convert.h"
#include "meshtrain/core/half.h"
#include "meshtrain/io/gpt_model_file.h"
#include "meshtrain/io/hf_llama.h"
#include "meshtrain/io/model_file.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/gpt_spec.h"
#include "meshtrain/nn/llama_spec.h"
#include "meshtrain/nn/shard_slicing.h"
#include "test_paths.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures";
constexpr float kUnwritten = -1234.5f;

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("mt_range_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// The HF fixture copied with its tensors in bf16, split over two files.
fs::path bf16_sharded_copy(const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy_file(kFixtures + "/llama_tiny_hf/config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  const SafetensorsFile src = SafetensorsFile::open(kFixtures + "/llama_tiny_hf/model.safetensors");
  std::vector<std::pair<std::string, Tensor>> parts[2];
  std::string map;
  const auto names = src.names();
  for (size_t i = 0; i < names.size(); ++i) {
    Tensor t = Tensor::zeros(src.info(names[i]).shape, DType::BF16);
    t.copy_from(src.read(names[i]));
    parts[i % 2].emplace_back(names[i], t);
    map += std::string(map.empty() ? "" : ",") + "\"" + names[i] + "\":\"part" + std::to_string(i % 2) + ".safetensors\"";
  }
  for (int p = 0; p < 2; ++p) write_safetensors((dir / ("part" + std::to_string(p) + ".safetensors")).string(), parts[p]);
  std::ofstream(dir / "model.safetensors.index.json") << "{\"weight_map\":{" << map << "}}";
  return dir;
}

void expect_ranges_match_whole_load(const std::string& path, const ModelSpec& spec) {
  SCOPED_TRACE(path);
  ASSERT_TRUE(ckpt::can_load_range(path, spec));
  auto whole = spec.build();
  ckpt::load_init_weights(path, *whole);
  const float* want = whole->param_buffer().data<float>();
  const int64_t P = spec.num_params();
  std::vector<ElemSpan> ranges = {{0, 0}, {0, P}, {1, P - 1}, {P / 3, P / 2}, {P - 7, P}};
  for (const ParamInfo& p : spec.layout().params) ranges.push_back({p.begin + 1, std::min(P, p.end() + 3)});
  for (const ElemSpan& r : ranges) {
    auto model = spec.build();
    float* got = model->param_buffer().data<float>();
    std::fill(got, got + P, kUnwritten);
    ckpt::load_init_weights(path, *model, r);
    for (int64_t i = 0; i < P; ++i) {
      const float w = i >= r.begin && i < r.end ? want[i] : kUnwritten;
      ASSERT_EQ(std::memcmp(&got[i], &w, 4), 0) << "element " << i << " of [" << r.begin << ", " << r.end << ")";
    }
  }
}

// Tensor-parallel shards (BufferWindow::shard): each tp rank's buffer gets
// exactly its slices of the whole load, and a range of it only that range.
void expect_shards_match_whole_load(const std::string& path, const ModelSpec& spec, int tp) {
  SCOPED_TRACE(path + " at tp " + std::to_string(tp));
  auto whole = spec.build();
  ckpt::load_init_weights(path, *whole);
  for (int r = 0; r < tp; ++r) {
    ModelShard shard;
    shard.tp_rank = r, shard.tp_size = tp;
    const auto sspec = spec.sharded(shard);
    const int64_t S = sspec->num_params();
    std::vector<float> want(static_cast<size_t>(S));
    copy_logical_to_shard(spec.layout(), sspec->layout(), r, whole->param_buffer().data<float>(), want.data());
    for (const ElemSpan range : {ElemSpan{0, S}, ElemSpan{S / 3, S / 2 + 5}}) {
      Tensor buf = Tensor::zeros({S}, DType::F32);
      float* got = buf.data<float>();
      std::fill(got, got + S, kUnwritten);
      ckpt::load_init_weights(path, spec, BufferWindow::shard(buf, range, spec.layout(), sspec->layout(), r));
      for (int64_t i = 0; i < S; ++i) {
        const float w = i >= range.begin && i < range.end ? want[i] : kUnwritten;
        ASSERT_EQ(std::memcmp(&got[i], &w, 4), 0) << "tp rank " << r << " element " << i;
      }
    }
  }
}

}  // namespace

TEST(init_from_range, tensor_parallel_shards_read_only_their_slices) {
  const fs::path dir = scratch();
  const std::string hf = kFixtures + "/llama_tiny_hf";
  const auto spec = LlamaSpec::make(read_hf_llama_config(hf));
  expect_shards_match_whole_load(hf, *spec, 2);
  expect_shards_match_whole_load(bf16_sharded_copy(dir / "bf16").string(), *spec, 2);
  auto model = spec->build();
  ckpt::load_init_weights(hf, *model);
  const std::string file = (dir / "llama.safetensors").string();
  save_model_safetensors(file, *spec, model->param_buffer());
  expect_shards_match_whole_load(file, *spec, 2);
  expect_shards_match_whole_load(ckpt::import_model_file(file, (dir / "ckpt").string()), *spec, 2);
  // GPT in its own format: fused q|k|v and a vocabulary-parallel wte.
  const std::string gpt_hf = kFixtures + "/gpt_tiny_hf.safetensors";
  const auto gspec = GPTSpec::make(ckpt::read_init_config(gpt_hf, gpt_preset("tiny").n_head));
  auto gpt = gspec->build();
  ckpt::load_init_weights(gpt_hf, *gpt);
  const std::string ours = (dir / "gpt.safetensors").string();
  save_gpt_safetensors(ours, GPTParams::view(gspec->config(), gpt->param_buffer()), gspec->config());
  expect_shards_match_whole_load(ours, *gspec, 2);
  expect_shards_match_whole_load(gpt_hf, *gspec, 2);
  fs::remove_all(dir);
}

// A shard window made for another model is refused before anything is read.
TEST(init_from_range, a_shard_window_of_another_model_is_refused) {
  const std::string hf = kFixtures + "/llama_tiny_hf";
  const auto spec = LlamaSpec::make(read_hf_llama_config(hf));
  LlamaConfig other = spec->config();
  other.n_layer += 1;
  const auto ospec = LlamaSpec::make(other);
  ModelShard shard;
  shard.tp_rank = 0, shard.tp_size = 2;
  const auto oshard = ospec->sharded(shard);
  Tensor buf = Tensor::zeros({oshard->num_params()}, DType::F32);
  const BufferWindow window =
      BufferWindow::shard(buf, {0, oshard->num_params()}, ospec->layout(), oshard->layout(), 0);
  const std::string e = meshtrain::testing::error_of([&] { ckpt::load_init_weights(hf, *spec, window); });
  EXPECT_NE(e.find("tensor-parallel shard of a " + std::to_string(ospec->num_params()) + "-parameter model"),
            std::string::npos) << e;
}

TEST(init_from_range, every_range_source_gives_the_whole_loads_values) {
  const fs::path dir = scratch();
  const std::string hf = kFixtures + "/llama_tiny_hf";
  const auto spec = LlamaSpec::make(read_hf_llama_config(hf));
  expect_ranges_match_whole_load(hf, *spec);
  expect_ranges_match_whole_load(bf16_sharded_copy(dir / "bf16").string(), *spec);
  // A model file meshtrain wrote, and a checkpoint directory made from it.
  auto model = spec->build();
  ckpt::load_init_weights(hf, *model);
  const std::string file = (dir / "llama.safetensors").string();
  save_model_safetensors(file, *spec, model->param_buffer());
  expect_ranges_match_whole_load(file, *spec);
  const std::string step_dir = ckpt::import_model_file(file, (dir / "ckpt").string());
  expect_ranges_match_whole_load(step_dir, *spec);
  fs::remove_all(dir);
}

// A GPT-2 file as transformers publishes them: "transformer."-prefixed
// names, bf16 tensors, the causal-mask buffers and a tied lm_head. Ranges
// and tp shards of it equal its whole load (every 16-bit value widened).
TEST(init_from_range, a_published_style_gpt2_file_reads_by_range_and_slices) {
  const std::string fixture = kFixtures + "/gpt_tiny_hf.safetensors";
  const SafetensorsFile src = SafetensorsFile::open(fixture);
  const fs::path dir = scratch();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : src.names()) {
    Tensor t = Tensor::zeros(src.info(name).shape, DType::BF16);
    t.copy_from(src.read(name));
    tensors.emplace_back("transformer." + name, t);
    if (name == "wte.weight") tensors.emplace_back("lm_head.weight", t);
  }
  const GPTConfig cfg = ckpt::read_init_config(fixture, gpt_preset("tiny").n_head);
  for (int l = 0; l < cfg.n_layer; ++l)
    tensors.emplace_back("transformer.h." + std::to_string(l) + ".attn.bias",
                         Tensor::zeros({1, 1, cfg.seq_len, cfg.seq_len}, DType::F32));
  const std::string file = (dir / "published.safetensors").string();
  write_safetensors(file, tensors);
  const auto spec = GPTSpec::make(cfg);
  ASSERT_TRUE(ckpt::can_load_range(file, *spec));
  expect_ranges_match_whole_load(file, *spec);
  expect_shards_match_whole_load(file, *spec, 2);
  // The widened values are the fixture's rounded to bf16.
  auto whole = spec->build();
  ckpt::load_init_weights(file, *whole);
  auto exact = spec->build();
  ckpt::load_init_weights(fixture, *exact);
  const float* a = whole->param_buffer().data<float>();
  const float* b = exact->param_buffer().data<float>();
  for (int64_t i = 0; i < spec->num_params(); ++i)
    ASSERT_EQ(a[i], bf16_to_f32(f32_to_bf16(b[i]))) << "element " << i;
  fs::remove_all(dir);
}

// GPT: safetensors files, ours and Hugging Face GPT-2's (Conv1D weights stored
// transposed), read by range; llm.c files load whole only, and asking them
// for a range is a clear error.
TEST(init_from_range, gpt_safetensors_read_by_range_and_llmc_files_refuse) {
  const std::string hf = kFixtures + "/gpt_tiny_hf.safetensors";
  const auto spec = GPTSpec::make(ckpt::read_init_config(hf, gpt_preset("tiny").n_head));
  expect_ranges_match_whole_load(hf, *spec);
  auto model = spec->build();
  ckpt::load_init_weights(hf, *model);
  const fs::path dir = scratch();
  const GPTParams params = GPTParams::view(spec->config(), model->param_buffer());
  const std::string ours = (dir / "gpt.safetensors").string();
  save_gpt_safetensors(ours, params, spec->config());
  expect_ranges_match_whole_load(ours, *spec);
  const std::string llmc = (dir / "gpt.bin").string();
  write_llmc_model(llmc, params, spec->config());
  EXPECT_FALSE(ckpt::can_load_range(llmc, *spec));
  ckpt::load_init_weights(llmc, *model);  // whole: fine
  const std::string e = meshtrain::testing::error_of([&] { ckpt::load_init_weights(llmc, *model, {0, 10}); });
  EXPECT_NE(e.find("loads whole only"), std::string::npos) << e;
  fs::remove_all(dir);
}
