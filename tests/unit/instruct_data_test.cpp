// Instruction data (data/instruct_prepare.h) and masked shards
// (data/token_shard.h): each template renders prompt and response segments
// with the loss mask on the response only; masked shards round-trip tokens
// and mask; the loader turns a 0 mask into an ignored target (-1); bad
// input (broken JSON, an unknown role, a corrupt mask, mixed shard kinds, a
// window that is not the training seq_len) is a clear error naming where.
#include <gtest/gtest.h>

#include "error_of.h"

#include <filesystem>
#include <fstream>

#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/instruct_prepare.h"
#include "meshtrain/data/token_shard.h"
#include "meshtrain/data/tokenizer.h"
#include "test_paths.h"

using namespace meshtrain::data;
namespace fs = std::filesystem;

namespace {

using meshtrain::testing::error_of;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "mt_instruct_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// The trained bytes of an example under the byte tokenizer, as text.
std::string trained_text(const EncodedExample& e) {
  std::string s;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    if (e.mask[i]) s.push_back(static_cast<char>(e.tokens[i]));
  return s;
}

}  // namespace

TEST(instruct, plain_template_trains_on_the_response_and_eos_only) {
  auto tok = load_tokenizer("bytes");
  EncodedExample e = encode_example(R"({"prompt": "2+2=", "response": "4"})", *tok, "plain", ".", "x");
  std::string all(e.tokens.begin(), e.tokens.end());
  EXPECT_EQ(all, "2+2=4.");
  EXPECT_EQ(trained_text(e), "4.");
  EncodedExample m = encode_example(
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
          {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"},
          {"role": "assistant", "content": "A2"}]})", *tok, "plain", "", "x");
  EXPECT_EQ(std::string(m.tokens.begin(), m.tokens.end()), "SQ1A1Q2A2");
  EXPECT_EQ(trained_text(m), "A1A2");
  // A response-first example: the first token is never a target.
  EncodedExample r = encode_example(R"({"messages": [{"role": "assistant", "content": "hi"}]})",
                                    *tok, "plain", "", "x");
  EXPECT_EQ(trained_text(r), "i");
}

TEST(instruct, chatml_marks_the_assistant_turn_and_its_end) {
  auto tok = load_tokenizer("bytes");
  EncodedExample e =
      encode_example(R"({"prompt": "hi", "response": "yo"})", *tok, "chatml", "", "x");
  EXPECT_EQ(std::string(e.tokens.begin(), e.tokens.end()),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
  EXPECT_EQ(trained_text(e), "yo<|im_end|>");
}

TEST(instruct, llama3_template_uses_the_tokenizers_special_tokens) {
  auto tok = load_tokenizer(std::string(MESHTRAIN_SOURCE_DIR) +
                            "/tests/fixtures/tokenizers/llama3_style/tokenizer.json");
  EncodedExample e =
      encode_example(R"({"prompt": "Hello", "response": "World"})", *tok, "llama3", "", "x");
  const int32_t bot = *tok->token_id("<|begin_of_text|>"), eot = *tok->token_id("<|eot_id|>");
  ASSERT_FALSE(e.tokens.empty());
  EXPECT_EQ(e.tokens.front(), bot);
  EXPECT_EQ(e.tokens.back(), eot);
  EXPECT_EQ(e.mask.back(), 1);  // <|eot_id|> closes the response and is trained on
  // The trained tokens decode to the response and its end.
  std::vector<int32_t> trained;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    if (e.mask[i]) trained.push_back(e.tokens[i]);
  EXPECT_EQ(tok->decode_bytes(trained, false), "World<|eot_id|>");
  // Both headers and the user's turn are not.
  std::vector<int32_t> rest;
  for (size_t i = 0; i < e.tokens.size(); ++i)
    if (!e.mask[i]) rest.push_back(e.tokens[i]);
  EXPECT_EQ(tok->decode_bytes(rest, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(instruct, bad_examples_name_the_line) {
  auto tok = load_tokenizer("bytes");
  EXPECT_NE(error_of([&] { encode_example("{not json", *tok, "plain", "", "f.jsonl:3"); })
                .find("f.jsonl:3: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] {
              encode_example(R"({"messages": [{"role": "bot", "content": "x"}]})", *tok, "plain",
                             "", "f.jsonl:4");
            }).find("f.jsonl:4: messages[0] has role 'bot'"), std::string::npos);
  EXPECT_NE(error_of([&] { encode_example(R"({"prompt": "x"})", *tok, "plain", "", "f:5"); })
                .find("needs string \"prompt\" and \"response\""), std::string::npos);
  EXPECT_NE(error_of([&] { encode_example(R"({"prompt": "x", "response": "y"})", *tok, "jinja",
                                          "", "f:6"); }).find("unknown chat template 'jinja'"),
            std::string::npos);
}

TEST(instruct, prepare_lays_one_example_per_window_and_the_loader_masks_targets) {
  TempDir d;
  const fs::path jsonl = d.path / "data.jsonl";
  {
    std::ofstream f(jsonl);
    for (int i = 0; i < 12; ++i) f << R"({"prompt": "q)" << i << R"(=", "response": "a)" << i << "\"}\n";
    f << R"({"prompt": "0123456789012345678901234567890123456789", "response": "late"})" << "\n";
  }
  InstructOptions o;
  o.inputs = {jsonl.string()};
  o.out_dir = (d.path / "out").string();
  o.seq_len = 16;
  o.val_fraction = 0;
  const InstructResult r = prepare_instruct(o);
  EXPECT_EQ(r.examples, 12);
  EXPECT_EQ(r.truncated, 1);
  EXPECT_EQ(r.dropped, 1);  // cut before its response
  ASSERT_EQ(r.train_shards.size(), 1u);
  const TokenShard shard(r.train_shards[0]);
  ASSERT_TRUE(shard.masked());
  EXPECT_EQ(shard.window(), 16);
  EXPECT_EQ(shard.num_tokens(), 12 * 16 + 1);
  // The loader: inputs are the window, targets shifted by one with every
  // untrained token replaced by -1.
  LoaderOptions lo;
  lo.pattern = (d.path / "out" / "train_*.bin").string();
  lo.batch = 12;
  lo.seq_len = 16;
  lo.prefetch = 0;
  DataLoader loader(lo);
  Batch b = loader.next();
  for (int64_t w = 0; w < 12; ++w) {
    const int32_t* in = b.inputs.data<int32_t>() + w * 16;
    const int32_t* tg = b.targets.data<int32_t>() + w * 16;
    std::string prompt, trained;
    for (int j = 0; j < 16 && in[j]; ++j) prompt.push_back(static_cast<char>(in[j]));
    for (int j = 0; j < 16; ++j)
      if (tg[j] >= 0) trained.push_back(static_cast<char>(tg[j]));
    // "qN=aN": the targets not ignored are exactly "aN".
    const std::string n = prompt.substr(1, prompt.find('=') - 1);
    EXPECT_EQ(trained, "a" + n) << prompt;
  }
  // A different training window is a clear error.
  lo.seq_len = 32;
  EXPECT_NE(error_of([&] { DataLoader bad(lo); }).find("laid out for seq_len 16, but training uses seq_len 32"),
            std::string::npos);
}

TEST(instruct, masked_shards_round_trip_and_refuse_corruption) {
  TempDir d;
  const std::string path = (d.path / "m_000000.bin").string();
  std::vector<int32_t> tokens = {5, 70000, 9, 1};
  std::vector<uint8_t> mask = {0, 1, 1, 0};
  write_masked_shard(path, tokens, mask, 4, 3);
  const TokenShard s(path);
  ASSERT_TRUE(s.masked());
  EXPECT_EQ(s.token_bytes(), 4);
  std::vector<int32_t> t(4);
  std::vector<uint8_t> m(4);
  s.read(0, 4, t.data());
  s.read_mask(0, 4, m.data());
  EXPECT_EQ(t, tokens);
  EXPECT_EQ(m, mask);
  // 2-byte tokens refuse an id that does not fit.
  EXPECT_NE(error_of([&] { write_masked_shard(path + "2", tokens, mask, 2, 3); }).find("does not fit"),
            std::string::npos);
  // A mask byte that is not 0/1, and a truncated file.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + 4 * 4 + 2);
    f.put(7);
  }
  EXPECT_NE(error_of([&] { TokenShard bad(path); }).find("is not 0 or 1"), std::string::npos);
  fs::resize_file(path, 1024 + 10);
  EXPECT_NE(error_of([&] { TokenShard bad(path); }).find("truncated"), std::string::npos);
  // Masked and plain shards in one set.
  write_masked_shard((d.path / "x_000000.bin").string(), tokens = {1, 2, 3, 4}, mask, 2, 3);
  write_token_shard((d.path / "x_000001.bin").string(), std::vector<uint16_t>{1, 2, 3, 4});
  EXPECT_NE(error_of([&] { ShardSet set((d.path / "x_*.bin").string(), 3); }).find("mixes masked"),
            std::string::npos);
}
