// Hugging Face Llama checkpoints as they are published: weights split over
// several files named by model.safetensors.index.json, stored in bf16 (or
// fp16). Loading such a folder gives exactly the 16-bit values widened to
// f32 (the same as loading the f32 fixture and rounding it), and a weight
// map naming a missing file is a clear error.
#include <gtest/gtest.h>

#include "error_of.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "meshtrain/io/hf_llama.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/llama_spec.h"
#include "test_paths.h"

using namespace meshtrain;
namespace fs = std::filesystem;

namespace {

using meshtrain::testing::error_of;

const std::string kFixture = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/llama_tiny_hf";

// The fixture rewritten as `parts` files of `dtype` tensors with an index.
fs::path sharded_copy(const fs::path& dir, DType dtype, int parts) {
  fs::create_directories(dir);
  fs::copy_file(fs::path(kFixture) / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  const SafetensorsFile src = SafetensorsFile::open(kFixture + "/model.safetensors");
  const std::vector<std::string> names = src.names();
  nlohmann::json map = nlohmann::json::object();
  for (int p = 0; p < parts; ++p) {
    const std::string file = "model-0000" + std::to_string(p + 1) + "-of-0000" + std::to_string(parts) + ".safetensors";
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (size_t i = p; i < names.size(); i += parts) {
      Tensor t = Tensor::zeros(src.info(names[i]).shape, dtype);
      t.copy_from(src.read(names[i]));
      tensors.emplace_back(names[i], t);
      map[names[i]] = file;
    }
    write_safetensors((dir / file).string(), tensors);
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump();
  return dir;
}

}  // namespace

TEST(hf_llama_import, sharded_bf16_and_fp16_folders_load_their_values) {
  const LlamaConfig cfg = read_hf_llama_config(kFixture);
  const int64_t n = LlamaSpec::make(cfg)->num_params();
  Tensor f32 = Tensor::zeros({n});
  load_hf_llama_weights(kFixture, f32, cfg);
  const fs::path tmp = fs::temp_directory_path() / ("mt_hf_shards_" + std::to_string(::getpid()));
  for (DType dt : {DType::BF16, DType::F16}) {
    const fs::path dir = sharded_copy(tmp / dtype_name(dt), dt, 3);
    EXPECT_EQ(read_hf_llama_config(dir.string()).n_layer, cfg.n_layer);
    Tensor got = Tensor::zeros({n});
    load_hf_llama_weights(dir.string(), got, cfg);
    // The expected values: the f32 parameters rounded to dt and widened back.
    Tensor rounded = Tensor::zeros({n}, dt);
    rounded.copy_from(f32);
    Tensor want = Tensor::zeros({n});
    want.copy_from(rounded);
    int64_t differ = 0, changed = 0;
    for (int64_t i = 0; i < n; ++i) {
      differ += got.data<float>()[i] != want.data<float>()[i];
      changed += want.data<float>()[i] != f32.data<float>()[i];
    }
    EXPECT_EQ(differ, 0) << dtype_name(dt);
    EXPECT_GT(changed, 0) << dtype_name(dt) << ": the 16-bit copy should round something";
  }
  // An index naming a file that is not there.
  const fs::path broken = sharded_copy(tmp / "broken", DType::BF16, 2);
  fs::remove(broken / "model-00002-of-00002.safetensors");
  Tensor got = Tensor::zeros({n});
  const std::string e = error_of([&] { load_hf_llama_weights(broken.string(), got, cfg); });
  EXPECT_NE(e.find("model-00002-of-00002.safetensors"), std::string::npos) << e;
  fs::remove_all(tmp);
}
