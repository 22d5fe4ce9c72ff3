// `data prepare` with a Hugging Face tokenizer: parallel, chunked encoding
// gives exactly the ids of encoding each whole file; 4-byte shards for
// vocabularies over 65536; clear errors for what does not fit.
// test-links: mt_data
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/data/text_prepare.h"
#include "meshtrain/data/token_shard.h"
#include "meshtrain/data/tokenizer.h"
#include "test_paths.h"

using namespace meshtrain;
using namespace meshtrain::data;
namespace fs = std::filesystem;

namespace {
const std::string kFixtures = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/tokenizers/";

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mt_tok_data_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<int32_t> read_series(const std::vector<std::string>& shards) {
  std::vector<int32_t> all;
  for (const std::string& s : shards) {
    const TokenShard shard(s);
    const size_t at = all.size();
    all.resize(at + static_cast<size_t>(shard.num_tokens()));
    shard.read(0, shard.num_tokens(), all.data() + at);
  }
  return all;
}

// Text whose pre-tokenization is easy to get wrong at chunk edges: runs of
// blank lines and indentation, CRLF, digits, multi-byte characters.
std::string awkward_text(int copies, int salt) {
  std::string t;
  for (int i = 0; i < copies; ++i) {
    t += "Line " + std::to_string(i * 37 + salt) + ": the quick brown fox, isn't it?\n";
    t += "   indented line with  double  spaces\n\n\n";
    t += "Привет, мир! 你好，世界。 😀👍🏽\r\n";
    if (i % 3 == 0) t += "\n\t\ttabbed\n  \n";
    t += "<|endoftext|>separated\n";
    t += "code:\n     five spaces\n\ttab\n\t\ttwo tabs\n";
  }
  return t;
}
}  // namespace

// Byte-level BPE, and SentencePiece-style BPE (later chunks continue the
// file's text: no "▁" of their own).
class PrepareWholeFile : public ::testing::TestWithParam<std::string> {};

TEST_P(PrepareWholeFile, prepare_equals_encoding_each_whole_file_at_any_thread_count) {
  TempDir dir;
  const std::string tok_path = kFixtures + GetParam() + "/tokenizer.json";
  const std::string sep = GetParam() == "llama2_style" ? "</s>" : "<|endoftext|>";
  write(dir.file("in/a.txt"), awkward_text(40, 1));
  write(dir.file("in/b.txt"), awkward_text(25, 2));
  const auto tok = load_tokenizer(tok_path);
  std::vector<int32_t> expect;
  for (const char* f : {"in/a.txt", "in/b.txt"}) {
    std::ifstream in(dir.file(f), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    expect.push_back(*tok->token_id(sep));
    tok->encode_into(ss.str(), expect);
  }
  std::vector<int32_t> first;
  for (int threads : {1, 3}) {
    PrepareOptions o;
    o.inputs = {dir.file("in")};
    o.out_dir = dir.file("out" + std::to_string(threads));
    o.val_fraction = 0;
    o.chunk_bytes = 48;  // many chunks, most cut where a naive cut would change the tokens
    o.tokenizer = tok_path;
    o.doc_separator = sep;
    o.threads = threads;
    const PrepareResult r = prepare_text(o);
    EXPECT_GT(r.chunks, 40);
    EXPECT_EQ(r.token_bytes, 2);
    EXPECT_EQ(r.vocab_size, tok->vocab_size());
    const std::vector<int32_t> got = read_series(r.train_shards);
    EXPECT_EQ(got, expect) << threads << " thread(s)";
    EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "tokenizer.json")) << "the tokenizer travels with the shards";
  }
}
INSTANTIATE_TEST_SUITE_P(data_tokenized, PrepareWholeFile,
                         ::testing::Values("gpt2_style", "llama2_style"));

TEST(data_tokenized, prepare_splits_train_and_val_without_losing_tokens) {
  TempDir dir;
  write(dir.file("in/a.txt"), awkward_text(60, 3));
  PrepareOptions o;
  o.inputs = {dir.file("in/a.txt")};
  o.out_dir = dir.file("out");
  o.val_fraction = 0.2;
  o.chunk_bytes = 256;
  o.tokenizer = kFixtures + "llama3_style";  // a folder holding tokenizer.json
  o.threads = 2;
  const PrepareResult r = prepare_text(o);
  EXPECT_GT(r.val_tokens, 0);
  EXPECT_GT(r.train_tokens, r.val_tokens);
  const auto tok = load_tokenizer(o.tokenizer);
  std::ifstream in(o.inputs[0], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(static_cast<size_t>(r.train_tokens + r.val_tokens), tok->encode(ss.str()).size());
}

TEST(data_tokenized, four_byte_shards_for_vocabularies_over_65536) {
  TempDir dir;
  // The GPT-2 style fixture with one more special token far above 65535, as
  // Llama 3's <|begin_of_text|> is at 128000.
  nlohmann::json j;
  std::ifstream(kFixtures + "gpt2_style/tokenizer.json") >> j;
  j["added_tokens"].push_back({{"id", 128000}, {"content", "<|big|>"}, {"special", true},
                               {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                               {"single_word", false}});
  std::ofstream(dir.file("big.json")) << j.dump();
  write(dir.file("in.txt"), "hello <|big|> world\nand more text here\n");
  PrepareOptions o;
  o.inputs = {dir.file("in.txt")};
  o.out_dir = dir.file("out");
  o.val_fraction = 0;
  o.tokenizer = dir.file("big.json");
  const PrepareResult r = prepare_text(o);
  EXPECT_EQ(r.vocab_size, 128001);
  EXPECT_EQ(r.token_bytes, 4);
  const TokenShard shard(r.train_shards.at(0));
  EXPECT_EQ(shard.token_bytes(), 4);
  const std::vector<int32_t> got = read_series(r.train_shards);
  EXPECT_NE(std::find(got.begin(), got.end(), 128000), got.end());
  EXPECT_EQ(load_tokenizer(o.tokenizer)->decode_bytes(got), "hello <|big|> world\nand more text here\n");
}

TEST(data_tokenized, a_token_wider_than_the_shards_is_an_error) {
  TempDir dir;
  ShardSeriesWriter narrow(dir.path.string(), "t", 100, 2);
  const std::vector<int32_t> ok = {1, 65535}, bad = {70000};
  narrow.append(std::span<const int32_t>(ok));
  try {
    narrow.append(std::span<const int32_t>(bad));
    ADD_FAILURE() << "70000 does not fit a 2-byte shard";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 70000 does not fit 2-byte"), std::string::npos);
  }
  ShardSeriesWriter wide(dir.path.string(), "w", 2, 4);
  const std::vector<int32_t> ids = {0, 70000, 128255, 5, 65536};
  wide.append(std::span<const int32_t>(ids));
  EXPECT_EQ(read_series(wide.finish()), ids);
}

TEST(data_tokenized, unknown_separator_or_tokenizer_is_an_error) {
  TempDir dir;
  write(dir.file("in.txt"), "text\n");
  PrepareOptions o;
  o.inputs = {dir.file("in.txt")};
  o.out_dir = dir.file("out");
  o.tokenizer = kFixtures + "gpt2_style/tokenizer.json";
  o.doc_separator = "<|nope|>";
  try {
    prepare_text(o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("document separator '<|nope|>' is not a token"),
              std::string::npos);
  }
  o.doc_separator.clear();
  o.tokenizer = dir.file("none.json");
  try {
    prepare_text(o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
}
