// Data layer: token shards, byte tokenizer, text preparation, the synthetic
// grammar and the data loader.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_tokenizer.h"
#include "meshtrain/data/data_loader.h"
#include "meshtrain/data/prefetcher.h"
#include "meshtrain/data/synth_dataset.h"
#include "meshtrain/data/synth_grammar.h"
#include "meshtrain/data/text_prepare.h"
#include "meshtrain/data/token_shard.h"

using namespace meshtrain;
using namespace meshtrain::data;
namespace fs = std::filesystem;

namespace {

// A fresh folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mt_data_test_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<uint16_t> iota_tokens(size_t n, uint16_t first = 0) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((first + i) % 65536);
  return t;
}

std::vector<uint16_t> read_all(const TokenShard& s) {
  std::vector<int32_t> v(static_cast<size_t>(s.num_tokens()));
  s.read(0, s.num_tokens(), v.data());
  return {v.begin(), v.end()};
}

// Runs f, expects a meshtrain::Error whose message contains every needle.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected a meshtrain::Error";
  } catch (const Error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
  }
}

std::string header_bytes(int32_t magic, int32_t version, int32_t count) {
  std::string h(kShardHeaderBytes, '\0');
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 4);
  std::memcpy(h.data() + 8, &count, 4);
  return h;
}

std::vector<int32_t> tensor_values(const Tensor& t) {
  return {t.data<int32_t>(), t.data<int32_t>() + t.numel()};
}

}  // namespace

// ---------------------------------------------------------------- shards

TEST(data, shard_roundtrip) {
  TempDir dir;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{70000}}) {  // 70000 > 65535
    const auto tokens = iota_tokens(n, 7);
    const std::string path = dir.file(fmt::format("s{}.bin", n));
    write_token_shard(path, tokens);
    EXPECT_EQ(fs::file_size(path), kShardHeaderBytes + 2 * n);
    TokenShard shard(path);
    EXPECT_EQ(shard.num_tokens(), static_cast<int64_t>(n));
    EXPECT_EQ(shard.version(), 1);
    EXPECT_EQ(read_all(shard), tokens);
    if (n > 0) {
      EXPECT_EQ(shard.token(static_cast<int64_t>(n) - 1), tokens.back());
    }
  }
  EXPECT_FALSE(fs::exists(dir.file("s0.bin.tmp." + std::to_string(::getpid()))));
}

TEST(data, shard_header_matches_llmc) {
  TempDir dir;
  write_token_shard(dir.file("a.bin"), iota_tokens(5));
  const std::string bytes = read_bytes(dir.file("a.bin"));
  int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0);
  uint16_t third;
  std::memcpy(&third, bytes.data() + 1024 + 4, 2);
  EXPECT_EQ(third, 2);
}

TEST(data, shard_u32_version7_roundtrip) {
  TempDir dir;
  std::vector<uint32_t> tokens = {0, 1, 70000, 128255, 5};
  write_token_shard_u32(dir.file("l.bin"), tokens);
  TokenShard shard(dir.file("l.bin"));
  EXPECT_EQ(shard.version(), 7);
  EXPECT_EQ(shard.token_bytes(), 4);
  ASSERT_EQ(shard.num_tokens(), 5);
  std::vector<int32_t> out(5);
  shard.read(0, 5, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 70000, 128255, 5}));
}

TEST(data, shard_series_writes_multiple_shards_and_removes_stale_ones) {
  TempDir dir;
  write_token_shard(shard_path(dir.str(), "train", 5), iota_tokens(3));  // stale, from "before"
  ShardSeriesWriter w(dir.str(), "train", 1000);
  const auto tokens = iota_tokens(2500, 11);
  w.append(std::span<const uint16_t>(tokens).subspan(0, 700));
  w.append(std::span<const uint16_t>(tokens).subspan(700));
  const auto paths = w.finish();
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(fs::path(paths[0]).filename(), "train_000000.bin");
  EXPECT_EQ(fs::path(paths[2]).filename(), "train_000002.bin");
  std::vector<uint16_t> all;
  std::vector<int64_t> sizes;
  for (const auto& p : paths) {
    TokenShard s(p);
    sizes.push_back(s.num_tokens());
    auto v = read_all(s);
    all.insert(all.end(), v.begin(), v.end());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{1000, 1000, 500}));
  EXPECT_EQ(all, tokens);
  EXPECT_FALSE(fs::exists(shard_path(dir.str(), "train", 5)));
}

TEST(data, shard_missing_file_is_an_error) {
  TempDir dir;
  expect_error([&] { TokenShard s(dir.file("nope.bin")); }, {dir.file("nope.bin"), "does not exist"});
}

TEST(data, shard_shorter_than_header_is_an_error) {
  TempDir dir;
  write_bytes(dir.file("short.bin"), header_bytes(kShardMagicU16, 1, 0).substr(0, 100));
  expect_error([&] { TokenShard s(dir.file("short.bin")); },
               {dir.file("short.bin"), "shorter than the 1024-byte header"});
}

TEST(data, shard_wrong_magic_is_an_error) {
  TempDir dir;
  write_bytes(dir.file("magic.bin"), header_bytes(12345, 1, 0));
  expect_error([&] { TokenShard s(dir.file("magic.bin")); },
               {dir.file("magic.bin"), "not an llm.c token shard"});
}

TEST(data, shard_unsupported_version_is_an_error) {
  TempDir dir;
  write_bytes(dir.file("v.bin"), header_bytes(kShardMagicU16, 3, 0));
  expect_error([&] { TokenShard s(dir.file("v.bin")); }, {dir.file("v.bin"), "unsupported", "version 3"});
}

TEST(data, shard_truncated_is_an_error) {
  TempDir dir;
  write_token_shard(dir.file("t.bin"), iota_tokens(100));
  fs::resize_file(dir.file("t.bin"), kShardHeaderBytes + 2 * 60);
  expect_error([&] { TokenShard s(dir.file("t.bin")); },
               {dir.file("t.bin"), "truncated: header says 100 tokens, file holds 60"});
}

TEST(data, shard_size_mismatch_is_an_error) {
  TempDir dir;
  // More bytes than the header announces, and an odd byte count.
  write_bytes(dir.file("big.bin"), header_bytes(kShardMagicU16, 1, 10) + std::string(2 * 12, 'x'));
  expect_error([&] { TokenShard s(dir.file("big.bin")); },
               {dir.file("big.bin"), "header says 10 tokens", "holds 12"});
  write_bytes(dir.file("odd.bin"), header_bytes(kShardMagicU16, 1, 10) + std::string(21, 'x'));
  expect_error([&] { TokenShard s(dir.file("odd.bin")); }, {dir.file("odd.bin"), "header says 10"});
}

// ---------------------------------------------------------------- tokenizer

TEST(data, tokenizer_roundtrip) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (const std::string& text : {std::string("Hello, world!\n"), std::string("naïve – ünïcode ✓"),
                                  all, std::string()}) {
    const auto tokens = tok.encode(text);
    EXPECT_EQ(tokens.size(), text.size());
    EXPECT_EQ(tok.decode(tokens), text);
  }
  EXPECT_EQ(tok.encode("A")[0], 65);
  EXPECT_EQ(tok.encode("\xff")[0], 255);
  const std::vector<int32_t> bad = {65, 300};
  expect_error([&] { tok.decode(bad); }, {"300", "position 1"});
  EXPECT_EQ(tok.token_repr('\n'), "\\n");
  EXPECT_EQ(tok.token_repr(7), "\\x07");
}

// ---------------------------------------------------------------- prepare

namespace {

// Files whose every line is unique, so lines identify where text went.
struct Corpus {
  TempDir dir;
  std::set<std::string> lines;
  size_t bytes = 0;
  Corpus() {
    for (int f = 0; f < 5; ++f) {
      std::string text;
      for (int l = 0; l < 400; ++l) {
        std::string line = "file " + std::to_string(f) + " line " + std::to_string(l) +
                           std::string(static_cast<size_t>(l % 37), 'x');
        lines.insert(line);
        text += line + "\n";
      }
      bytes += text.size();
      write_bytes(dir.file("in/sub" + std::to_string(f % 2) + "/doc" + std::to_string(f) + ".txt"),
                  text);
    }
    write_bytes(dir.file("in/index.dat"), std::string("\0\0\0\x02\0\0\x01\x00", 8));  // binary
    write_bytes(dir.file("in/.hidden"), "hidden text\n");
    fs::create_symlink("sub0/doc0.txt", dir.file("in/doc0.u8"));  // same file again
  }
};

std::string decode_shards(const std::vector<std::string>& paths) {
  std::string text;
  for (const auto& p : paths) {
    auto tokens = read_all(TokenShard(p));
    text += ByteTokenizer().decode(tokens);
  }
  return text;
}

std::set<std::string> split_lines(const std::string& text) {
  std::set<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.insert(line);
  return out;
}

}  // namespace

TEST(data, prepare_splits_text_without_overlap) {
  Corpus c;
  PrepareOptions o;
  o.inputs = {c.dir.file("in")};
  o.out_dir = c.dir.file("out");
  o.val_fraction = 0.1;
  o.chunk_bytes = 512;
  const PrepareResult r = prepare_text(o);
  EXPECT_EQ(r.files_read, 5);
  EXPECT_EQ(r.bytes_read, static_cast<int64_t>(c.bytes));
  EXPECT_EQ(r.skipped.size(), 2u);  // index.dat (binary) and doc0.u8 (same file)
  EXPECT_EQ(r.train_tokens + r.val_tokens, static_cast<int64_t>(c.bytes));
  EXPECT_GT(r.val_chunks, 0);
  // The count is llround(0.1 n): within 0.5 / n of 0.1 n, so 0.01 holds for
  // any n >= 50. Here n = 125 and 13 / 125 = 0.104 (a rounding tie).
  EXPECT_NEAR(static_cast<double>(r.val_chunks) / r.chunks, 0.1, 0.01);
  ASSERT_EQ(r.train_shards.size(), 1u);
  ASSERT_EQ(r.val_shards.size(), 1u);
  EXPECT_EQ(fs::path(r.train_shards[0]).filename(), "train_000000.bin");
  EXPECT_EQ(fs::path(r.val_shards[0]).filename(), "val_000000.bin");

  const std::string train = decode_shards(r.train_shards), val = decode_shards(r.val_shards);
  EXPECT_EQ(static_cast<int64_t>(train.size()), r.train_tokens);
  EXPECT_EQ(static_cast<int64_t>(val.size()), r.val_tokens);
  const auto train_lines = split_lines(train), val_lines = split_lines(val);
  EXPECT_FALSE(val_lines.empty());
  for (const auto& l : val_lines) EXPECT_EQ(train_lines.count(l), 0u) << "in both splits: " << l;
  std::set<std::string> all = train_lines;
  all.insert(val_lines.begin(), val_lines.end());
  EXPECT_EQ(all, c.lines);  // every input line, nothing else (no hidden file, no binary)
  EXPECT_EQ(train.find("hidden"), std::string::npos);
}

TEST(data, prepare_is_deterministic_and_seeded) {
  Corpus c;
  PrepareOptions o;
  o.inputs = {c.dir.file("in")};
  o.chunk_bytes = 512;
  o.out_dir = c.dir.file("a");
  prepare_text(o);
  o.out_dir = c.dir.file("b");
  prepare_text(o);
  o.out_dir = c.dir.file("c");
  o.seed = 2;
  prepare_text(o);
  EXPECT_EQ(read_bytes(c.dir.file("a/val_000000.bin")), read_bytes(c.dir.file("b/val_000000.bin")));
  EXPECT_EQ(read_bytes(c.dir.file("a/train_000000.bin")),
            read_bytes(c.dir.file("b/train_000000.bin")));
  EXPECT_NE(read_bytes(c.dir.file("a/val_000000.bin")), read_bytes(c.dir.file("c/val_000000.bin")));
}

TEST(data, prepare_shards_by_token_count) {
  Corpus c;
  PrepareOptions o;
  o.inputs = {c.dir.file("in/sub0/doc0.txt"), c.dir.file("in/sub1/doc1.txt")};
  o.out_dir = c.dir.file("out");
  o.shard_tokens = 4000;
  o.val_fraction = 0.0;
  const PrepareResult r = prepare_text(o);
  EXPECT_EQ(r.val_tokens, 0);
  EXPECT_TRUE(r.val_shards.empty());
  EXPECT_EQ(static_cast<int64_t>(r.train_shards.size()), (r.train_tokens + 3999) / 4000);
  EXPECT_EQ(decode_shards(r.train_shards),
            read_bytes(o.inputs[0]) + read_bytes(o.inputs[1]));  // input order kept
}

TEST(data, prepare_missing_or_empty_input_is_an_error) {
  TempDir dir;
  PrepareOptions o;
  o.out_dir = dir.file("out");
  o.inputs = {dir.file("missing")};
  expect_error([&] { prepare_text(o); }, {dir.file("missing"), "does not exist"});
  fs::create_directories(dir.file("empty_dir"));
  o.inputs = {dir.file("empty_dir")};
  expect_error([&] { prepare_text(o); }, {"no text files"});
  write_bytes(dir.file("empty.txt"), "");
  o.inputs = {dir.file("empty.txt")};
  expect_error([&] { prepare_text(o); }, {"no text", "empty"});
  write_bytes(dir.file("bin.dat"), std::string("\0\1\2", 3));
  o.inputs = {dir.file("bin.dat")};
  expect_error([&] { prepare_text(o); }, {dir.file("bin.dat"), "binary"});
}

TEST(data, split_chunks_cover_text_at_line_ends) {
  const std::string text = "aaa\nbbbbbb\ncc\nd";
  const auto chunks = split_chunks(text, 4);
  std::string joined;
  for (auto c : chunks) joined += c;
  EXPECT_EQ(joined, text);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], "aaa\n");
  EXPECT_EQ(chunks[1], "bbbbbb\n");
  EXPECT_EQ(chunks[2], "cc\nd");
  EXPECT_TRUE(looks_like_text("plain\ttext\n"));
  EXPECT_FALSE(looks_like_text(std::string("a\0b", 3)));
}

// ---------------------------------------------------------------- synth

TEST(data, synth_entropy_matches_true_model_logloss) {
  const SynthGrammar g = SynthGrammar::build(1);
  const double analytic = g.entropy_rate_nats();
  EXPECT_GT(analytic, 1.0);
  EXPECT_LT(analytic, 2.0);
  // The true model's per-byte log-loss on its own long sample converges to the
  // entropy rate. Track the state from the bytes alone (unifilar).
  SynthSampler sampler(g, 12345);
  const int64_t n = 2'000'000;
  int state = g.start_state();
  double nll = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = sampler.next();
    const double p = g.prob(state, byte);
    ASSERT_GT(p, 0.0);
    nll -= std::log(p);
    state = g.next_state(state, byte);
  }
  const double empirical = nll / n;
  // Sampling error: the per-byte log-loss has sd 1.15 nats, so the mean of
  // n = 2e6 has standard error 8e-4 (5.6e-4 by batch means): 1% (0.0158) is
  // ~20 sigma; a wrong stationary distribution or entropy formula is off by
  // more. Measured 5.5e-4 (seed 12345).
  EXPECT_NEAR(empirical, analytic, 0.01 * analytic);
  const auto pi = g.stationary_distribution();
  double sum = 0;
  for (double x : pi) sum += x;
  // pi is renormalized in double each iteration: its sum is 1 to ~S 2^-53
  // (S = 71 states: 8e-15). Measured exactly 1.
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(data, synth_entropy_of_a_hand_computed_automaton) {
  // Two states: A emits 'a' (p) -> A or 'b' (1-p) -> B; B emits 'a' -> A.
  // pi(A) = 1/(2-p), H = pi(A) * h(p).
  const double p = 0.3;
  std::vector<SynthState> s = {{"A", {{'a', p, 0}, {'b', 1 - p, 1}}}, {"B", {{'a', 1.0, 0}}}};
  const SynthGrammar g(s, 0);
  const double h = -p * std::log(p) - (1 - p) * std::log(1 - p);
  // The power iteration stops at an L1 change < 1e-15 and the lazy chain
  // contracts by 0.15 a step, so pi and the rate are exact to ~1e-15 plus a
  // few double roundings; 1e-12 is slack over that. Measured equal.
  EXPECT_NEAR(g.entropy_rate_nats(), h / (2 - p), 1e-12);
  // A state emitting one byte twice is not unifilar.
  std::vector<SynthState> bad = {{"A", {{'a', 0.5, 0}, {'a', 0.5, 0}}}};
  expect_error([&] { SynthGrammar g2(bad, 0); }, {"twice", "unifilar"});
  std::vector<SynthState> bad_sum = {{"A", {{'a', 0.5, 0}, {'b', 0.4, 0}}}};
  expect_error([&] { SynthGrammar g3(bad_sum, 0); }, {"sum to"});
}

TEST(data, synth_is_deterministic_by_seed) {
  const SynthGrammar g = SynthGrammar::build(1);
  const std::string a = SynthSampler(g, 5).generate_text(5000);
  EXPECT_EQ(a, SynthSampler(g, 5).generate_text(5000));
  EXPECT_NE(a, SynthSampler(g, 6).generate_text(5000));
  EXPECT_EQ(SynthGrammar::build(1).entropy_rate_nats(), g.entropy_rate_nats());
  EXPECT_NE(SynthGrammar::build(2).entropy_rate_nats(), g.entropy_rate_nats());
  // Word-like: sentences, spaces, capitals, only the grammar's bytes.
  EXPECT_NE(a.find(". "), std::string::npos);
  EXPECT_NE(a.find(' '), std::string::npos);
  for (char ch : a) EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(ch)) || std::string(" .,\n").find(ch) != std::string::npos);
}

TEST(data, synth_dataset_writes_shards_and_entropy_json) {
  TempDir dir;
  SynthOptions o;
  o.out_dir = dir.file("synth");
  o.tokens = 30000;
  o.shard_tokens = 20000;
  o.seed = 3;
  const SynthResult r = write_synth_dataset(o);
  EXPECT_EQ(r.train_shards.size(), 2u);
  EXPECT_EQ(r.val_shards.size(), 1u);
  EXPECT_EQ(r.val_tokens, 1500);
  const auto j = nlohmann::json::parse(read_bytes(dir.file("synth/entropy.json")));
  EXPECT_DOUBLE_EQ(j["entropy_nats_per_token"].get<double>(), SynthGrammar::build(1).entropy_rate_nats());
  // One double division, written with 17 digits (exact round trip): ~1 ulp
  // of 2.3 (4e-16) at most. Measured equal.
  EXPECT_NEAR(j["entropy_bits_per_token"].get<double>(), r.entropy_nats / std::log(2.0), 1e-12);
  // The shards hold exactly the sampler's stream.
  const SynthGrammar g = SynthGrammar::build(1);
  EXPECT_EQ(decode_shards(r.train_shards), SynthSampler(g, 3).generate_text(30000));
  EXPECT_NE(decode_shards(r.val_shards), SynthSampler(g, 3).generate_text(1500));
}

// ---------------------------------------------------------------- loader

namespace {

// Three shards of distinct tokens (so every window's content is unique).
struct LoaderData {
  TempDir dir;
  std::string pattern;
  LoaderData(std::vector<size_t> sizes = {2000, 1500, 2600}) {
    uint16_t next = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      write_token_shard(dir.file("d_train_00000" + std::to_string(i) + ".bin"),
                        iota_tokens(sizes[i], next));
      next = static_cast<uint16_t>(next + sizes[i]);
    }
    pattern = dir.file("d_train_*.bin");
  }
  LoaderOptions options(int64_t batch, int64_t seq, uint64_t seed = 1, int rank = 0,
                        int world = 1) const {
    LoaderOptions o;
    o.pattern = pattern;
    o.batch = batch;
    o.seq_len = seq;
    o.seed = seed;
    o.rank = rank;
    o.world_size = world;
    return o;
  }
};

std::vector<std::vector<int32_t>> take(DataLoader& l, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) out.push_back(tensor_values(l.next().inputs));
  return out;
}

}  // namespace

TEST(data, loader_batches_are_shaped_and_targets_shifted) {
  LoaderData d;
  DataLoader loader(d.options(4, 16));
  // (2000-1)/16 + (1500-1)/16 + (2600-1)/16 windows
  EXPECT_EQ(loader.num_windows(), 124 + 93 + 162);
  EXPECT_EQ(loader.batches_per_epoch(), (124 + 93 + 162) / 4);
  for (int step = 0; step < 10; ++step) {
    Batch b = loader.next();
    ASSERT_EQ(b.inputs.shape(), (Shape{4, 16}));
    ASSERT_EQ(b.targets.shape(), (Shape{4, 16}));
    EXPECT_EQ(b.inputs.dtype(), DType::I32);
    const int32_t* in = b.inputs.data<int32_t>();
    const int32_t* tg = b.targets.data<int32_t>();
    for (int r = 0; r < 4; ++r) {
      for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(tg[r * 16 + t], in[r * 16 + t + 1]);
      // Consecutive tokens of one shard (iota data): target = input + 1.
      for (int t = 0; t < 16; ++t) EXPECT_EQ(tg[r * 16 + t], (in[r * 16 + t] + 1) % 65536);
      // Windows start at multiples of T within their shard (shards start at 0, 2000, 3500).
      const int32_t first = in[r * 16];
      EXPECT_EQ((first - (first >= 3500 ? 3500 : first >= 2000 ? 2000 : 0)) % 16, 0);
    }
  }
}

TEST(data, loader_same_seed_same_batches_different_seed_different) {
  LoaderData d;
  DataLoader a(d.options(4, 16, 1)), b(d.options(4, 16, 1)), c(d.options(4, 16, 2));
  const auto xa = take(a, 30), xb = take(b, 30), xc = take(c, 30);
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(data, loader_epoch_visits_each_window_once_and_reshuffles) {
  LoaderData d;
  LoaderOptions o = d.options(1, 16);
  DataLoader loader(o);
  const int64_t n = loader.batches_per_epoch();
  std::set<int32_t> starts;
  std::vector<int32_t> epoch0, epoch1;
  for (int64_t i = 0; i < n; ++i) {
    Batch b = loader.next();
    EXPECT_EQ(b.position, (LoaderPosition{0, i}));
    epoch0.push_back(b.inputs.data<int32_t>()[0]);
    starts.insert(epoch0.back());
  }
  EXPECT_EQ(static_cast<int64_t>(starts.size()), n);  // no window twice
  EXPECT_EQ(loader.position(), (LoaderPosition{1, 0}));
  for (int64_t i = 0; i < n; ++i) epoch1.push_back(loader.next().inputs.data<int32_t>()[0]);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(std::set<int32_t>(epoch1.begin(), epoch1.end()), starts);
}

TEST(data, loader_resume_from_saved_position) {
  LoaderData d;
  DataLoader a(d.options(4, 16, 9));
  take(a, 100);  // crosses an epoch boundary (94 batches per epoch)
  const LoaderPosition saved = a.position();
  EXPECT_EQ(saved, (LoaderPosition{1, 6}));
  const auto expected = take(a, 20);

  LoaderOptions o = d.options(4, 16, 9);
  o.start = saved;
  DataLoader b(o);
  EXPECT_EQ(take(b, 20), expected);

  DataLoader c(d.options(4, 16, 9));
  take(c, 3);
  c.seek(saved);
  EXPECT_EQ(c.position(), saved);
  EXPECT_EQ(take(c, 20), expected);
  expect_error([&] { c.seek({0, 94}); }, {"outside", "batches per epoch"});
}

TEST(data, loader_ranks_split_the_global_batch) {
  LoaderData d;
  for (int world : {2, 3}) {
    const int64_t b = 2;
    DataLoader single(d.options(world * b, 16, 4));
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r)
      ranks.push_back(std::make_unique<DataLoader>(d.options(b, 16, 4, r, world)));
    EXPECT_EQ(single.batches_per_epoch(), ranks[0]->batches_per_epoch());
    for (int step = 0; step < 2 * single.batches_per_epoch() + 3; ++step) {
      const Batch whole = single.next();
      std::vector<int32_t> joined_in, joined_tg;
      for (auto& l : ranks) {
        const Batch part = l->next();
        EXPECT_EQ(part.position, whole.position);
        auto in = tensor_values(part.inputs), tg = tensor_values(part.targets);
        joined_in.insert(joined_in.end(), in.begin(), in.end());
        joined_tg.insert(joined_tg.end(), tg.begin(), tg.end());
      }
      ASSERT_EQ(joined_in, tensor_values(whole.inputs)) << "world " << world << " step " << step;
      ASSERT_EQ(joined_tg, tensor_values(whole.targets));
    }
  }
}

TEST(data, loader_prefetch_and_sync_agree) {
  LoaderData d;
  LoaderOptions sync = d.options(3, 8, 5);
  sync.prefetch = 0;
  LoaderOptions deep = d.options(3, 8, 5);
  deep.prefetch = 6;
  DataLoader a(sync), b(deep);
  EXPECT_EQ(take(a, 50), take(b, 50));
}

TEST(data, loader_prefetch_thread_shuts_down_cleanly) {
  LoaderData d;
  for (int depth : {1, 2, 8}) {
    LoaderOptions o = d.options(2, 16);
    o.prefetch = depth;
    {
      DataLoader idle(o);  // destroyed at once, thread possibly mid-batch
    }
    {
      DataLoader full(o);
      full.next();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // queue fills up
      full.seek({0, 3});  // restarts the thread
      // The restarted thread serves batch 3, as a loader without prefetch would.
      LoaderOptions plain = o;
      plain.prefetch = 0;
      plain.start = {0, 3};
      DataLoader reference(plain);
      const Batch got = full.next(), want = reference.next();
      ASSERT_EQ(got.inputs.numel(), want.inputs.numel());
      EXPECT_EQ(std::memcmp(got.inputs.raw(), want.inputs.raw(), want.inputs.nbytes()), 0)
          << "prefetch depth " << depth;
      EXPECT_EQ(full.position().batch, 4);
    }  // destroyed while the producer waits for space
  }
}

TEST(data, prefetcher_rethrows_producer_errors_in_order) {
  std::atomic<int> made{0};
  Prefetcher<int> p(
      [&](int64_t i) -> int {
        if (i == 3) throw Error("shard vanished at item 3");
        ++made;
        return static_cast<int>(i * 10);
      },
      0, 2);
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(p.next(), 10);
  EXPECT_EQ(p.next(), 20);
  expect_error([&] { p.next(); }, {"item 3"});
  expect_error([&] { p.next(); }, {"item 3"});  // stays failed, never hangs
  EXPECT_EQ(made.load(), 3);
}

TEST(data, loader_eval_sequence_repeats) {
  LoaderData d;
  LoaderOptions o = d.options(4, 16, 7);
  o.mode = LoaderMode::Eval;
  DataLoader val(o);
  const auto first = take(val, 10);
  val.rewind();
  EXPECT_EQ(take(val, 10), first);
  val.rewind();
  EXPECT_EQ(take(val, 10), first);
  // Past the end it starts the same order again (no reshuffle in eval mode).
  DataLoader whole(o);
  const auto pass1 = take(whole, static_cast<int>(whole.batches_per_epoch()));
  const auto pass2 = take(whole, static_cast<int>(whole.batches_per_epoch()));
  EXPECT_EQ(pass1, pass2);
}

TEST(data, loader_errors_name_the_problem) {
  LoaderData d({40});
  LoaderOptions o = d.options(2, 16);
  o.pattern = d.dir.file("nothing_*.bin");
  expect_error([&] { DataLoader l(o); }, {"no token shards match", "nothing_*.bin"});
  o = d.options(3, 16);  // 40 tokens: 2 windows of 17, fewer than a batch of 3
  expect_error([&] { DataLoader l(o); }, {"fewer than one global batch"});
  o = d.options(1, 64);
  expect_error([&] { DataLoader l(o); }, {"none has the 65 tokens"});
  o = d.options(1, 16, 1, 2, 2);
  expect_error([&] { DataLoader l(o); }, {"rank 2"});
}
