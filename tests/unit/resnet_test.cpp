// test-links: mt_nn mt_io
// meshtrain's ResNet against PyTorch (tools/make_resnet_fixture.py) on two
// small nets, one with basic blocks and the ImageNet stem (7x7/2, max pool),
// one with bottleneck blocks and the small-input stem: the training-mode
// forward's logits and loss, every trained parameter's gradient, the running
// statistics it updates (and no gradient for them), and the evaluation-mode
// logits from those statistics; top-1 as counted from the reference logits.
// Tolerance: fixture_compare.h (1e-5 of each tensor's scale). Also: the
// layout in torchvision's names, the presets' sizes and clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fixture_compare.h"
#include "meshtrain/core/error.h"
#include "meshtrain/io/safetensors.h"
#include "meshtrain/nn/model_registry.h"
#include "meshtrain/nn/resnet.h"
#include "test_paths.h"

using namespace meshtrain;
using meshtrain::testing::expect_close;

namespace {

const SafetensorsFile& reference() {
  static const SafetensorsFile f = SafetensorsFile::open(
      std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/resnet_reference.safetensors");
  return f;
}

Tensor fixture_tensor(const std::string& name) { return reference().read(name); }

ResNetConfig case_config(const std::string& c) {
  ResNetConfig cfg;
  if (c == "basic.") {
    cfg.layers = {1, 1};
    cfg.width = 4;
    cfg.in_channels = 3;
    cfg.image_size = 16;
    cfg.num_classes = 5;
  } else {
    cfg.bottleneck = true;
    cfg.layers = {1, 1};
    cfg.width = 2;
    cfg.in_channels = 2;
    cfg.image_size = 6;
    cfg.num_classes = 7;
    cfg.small_input = true;
  }
  return cfg;
}

void check_case(const std::string& c) {
  SCOPED_TRACE(c);
  auto spec = ResNetSpec::make(case_config(c));
  auto model = spec->build();
  for (const ParamInfo& p : spec->layout().params) reference().read_into(c + "param." + p.name, model->param(p));
  const Tensor x = fixture_tensor(c + "input"), labels = fixture_tensor(c + "labels");
  MicroBatch mb;
  mb.features = x.data<float>();
  mb.targets = labels.data<int32_t>();
  mb.B = static_cast<int>(x.dim(0));
  mb.T = 1;
  const float loss = model->forward(mb);
  const Tensor logits = fixture_tensor(c + "logits");
  expect_close("logits", model->logits(), logits.data<float>(), logits.numel());
  expect_close("loss", &loss, fixture_tensor(c + "loss").data<float>(), 1);
  // top-1 from the reference logits.
  int top1 = 0;
  const int64_t V = spec->vocab_size();
  for (int i = 0; i < mb.B; ++i) {
    const float* z = logits.data<float>() + i * V;
    top1 += std::count_if(z, z + V, [&](float v) { return v > z[mb.targets[i]]; }) == 0;
  }
  ASSERT_FALSE(model->metrics().empty());
  EXPECT_EQ(model->metrics()[0].name, "top1");
  EXPECT_EQ(model->metrics()[0].sum, top1);
  EXPECT_EQ(model->metrics()[0].count, mb.B);
  model->zero_grad();
  model->backward(1.0f);
  for (const ParamInfo& p : spec->layout().params) {
    if (p.trained) {
      const Tensor want = fixture_tensor(c + "grad." + p.name);
      expect_close("grad " + p.name, model->grad(p).data<float>(), want.data<float>(), want.numel());
    } else {
      const Tensor want = fixture_tensor(c + "running." + p.name);
      expect_close(p.name, model->param(p).data<float>(), want.data<float>(), want.numel());
      const float* g = model->grad(p).data<float>();
      EXPECT_TRUE(std::all_of(g, g + p.numel(), [](float v) { return v == 0.f; })) << p.name;
    }
  }
  model->set_training(false);
  mb.targets = nullptr;
  model->forward(mb);
  const Tensor eval = fixture_tensor(c + "eval_logits");
  expect_close("eval logits", model->logits(), eval.data<float>(), eval.numel());
  EXPECT_THROW(model->backward(1.0f), Error);  // no labels, evaluation mode
}

}  // namespace

TEST(resnet, basic_blocks_match_pytorch) { check_case("basic."); }
TEST(resnet, bottleneck_blocks_match_pytorch) { check_case("bottleneck."); }

TEST(resnet, layout_has_torchvision_names_and_state) {
  auto spec = ResNetSpec::make(resnet_preset("resnet-18"));
  const auto& params = spec->layout().params;
  EXPECT_EQ(params.front().name, "conv1.weight");
  EXPECT_EQ(params.back().name, "fc.bias");
  auto find = [&](const std::string& n) {
    return *std::find_if(params.begin(), params.end(), [&](const ParamInfo& p) { return p.name == n; });
  };
  EXPECT_FALSE(find("layer2.0.downsample.1.running_var").trained);
  EXPECT_FALSE(find("layer2.0.bn1.weight").decay);
  EXPECT_TRUE(find("layer4.1.conv2.weight").decay);
  // torchvision's parameter counts: 11,689,512 (resnet18), 25,557,032 (resnet50).
  EXPECT_EQ(resnet_preset("resnet-18").num_params(), 11689512);
  EXPECT_EQ(resnet_preset("resnet-50").num_params(), 25557032);
  EXPECT_EQ(spec->layout().num_units(), 1 + 8 + 1);
  // ResNet-50: 4.09 G multiply-adds per 224x224 image forward (torchvision's figure).
  const double gmacs = resnet_preset("resnet-50").flops_per_image() / 6e9;
  EXPECT_NEAR(gmacs, 4.09, 0.02);
}

TEST(resnet, registry_round_trip_and_errors) {
  auto spec = model_preset("resnet-fashion");
  EXPECT_EQ(spec->family(), "resnet");
  auto again = model_spec_from_json(spec->to_json(), "test");
  EXPECT_EQ(again->to_json(), spec->to_json());
  EXPECT_EQ(again->layout().numel, spec->layout().numel);
  nlohmann::json bad = spec->to_json();
  bad["block"] = "wide";
  EXPECT_THROW(model_spec_from_json(bad, "test"), Error);
  bad = spec->to_json();
  bad["layers"] = std::vector<int>{1, 1, 1, 1, 1, 1, 1};
  EXPECT_THROW(model_spec_from_json(bad, "test"), Error);
  // Token ids, a mixed precision, a label out of range: clear errors.
  auto model = spec->build();
  std::vector<int32_t> ids(28 * 28, 0);
  MicroBatch tokens{ids.data(), nullptr, 1, 28};
  EXPECT_THROW(model->forward(tokens), Error);
  EXPECT_THROW(model->set_precision(Precision::BF16), Error);
  std::vector<float> image(2 * 28 * 28, 0.5f);
  std::vector<int32_t> labels = {3, 10};
  MicroBatch mb;
  mb.features = image.data();
  mb.targets = labels.data();
  mb.B = 2;
  mb.T = 1;
  EXPECT_THROW(model->forward(mb), Error);
}
