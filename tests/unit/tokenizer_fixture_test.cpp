// BPE from tokenizer.json against the Hugging Face `tokenizers` library:
// fixtures from tools/make_tokenizer_fixtures.py (byte-level as GPT-2 and
// Llama 3 ship it; SentencePiece-style with byte fallback as Llama 2's file,
// newer Metaspace conversions and Metaspace with split spell it), each
// encoding and decoding awkward text.
// test-links: mt_data
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "meshtrain/core/error.h"
#include "meshtrain/data/shared_piece_cache.h"
#include "meshtrain/data/tokenizer.h"
#include "meshtrain/data/utf8.h"
#include "test_paths.h"

using namespace meshtrain;
using namespace meshtrain::data;

namespace {
const std::string kDir = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/tokenizers/";

nlohmann::json cases() {
  std::ifstream in(kDir + "cases.json");
  return nlohmann::json::parse(in);
}

class Reference : public ::testing::TestWithParam<std::string> {};
// Tokenizers whose decode(encode(x)) gives x back: byte-level ones, and
// SentencePiece-style ones that put "▁" before every text (a Metaspace
// "first" drops a leading space for good, as the library does, and the
// Metaspace decoder alone leaves byte tokens spelled out).
class RoundTrip : public Reference {};
}  // namespace

TEST_P(Reference, EncodesAsTheLibraryDoes) {
  const auto tok = load_tokenizer(kDir + GetParam() + "/tokenizer.json");
  const nlohmann::json c = cases()[GetParam()];
  EXPECT_EQ(tok->vocab_size(), c["vocab_size"].get<int>());
  int n = 0;
  for (const auto& e : c["encode"]) {
    const std::string text = e["text"].get<std::string>();
    EXPECT_EQ(tok->encode(text), e["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    EXPECT_EQ(tok->encode(text, true), e["ids_special"].get<std::vector<int32_t>>())
        << "text: " << text;
    ++n;
  }
  EXPECT_GE(n, 25);
}

TEST_P(Reference, DecodesAsTheLibraryDoes) {
  const auto tok = load_tokenizer(kDir + GetParam() + "/tokenizer.json");
  int cut = 0, spelled = 0;
  const nlohmann::json c = cases()[GetParam()];
  for (const auto& d : c["decode"]) {
    const auto ids = d["ids"].get<std::vector<int32_t>>();
    const std::string keep = d["keep_special"].get<std::string>();
    EXPECT_EQ(tok->decode(ids, false), keep);
    EXPECT_EQ(tok->decode(ids, true), d["skip_special"].get<std::string>());
    cut += keep.find("\xEF\xBF\xBD") != std::string::npos;
    spelled += keep.find("<0x") != std::string::npos;
  }
  if (GetParam() == "metaspace_split_style") {  // its decoder has no ByteFallback step
    EXPECT_GE(spelled, 3) << "byte tokens should decode spelled out, as the library does";
  } else {
    EXPECT_GE(cut, 3) << "the fixture should cut characters in some sequences";
  }
}

TEST_P(RoundTrip, RoundTripsAnyBytesIncludingInvalidUtf8) {
  const auto tok = load_tokenizer(kDir + GetParam() + "/tokenizer.json");
  std::mt19937 rng(7);
  std::vector<std::string> texts = {
      "plain ascii text, with punctuation!",
      std::string("invalid \xFF\xFE bytes \xC3 cut \xE2\x82 and \xF0\x9F\x98 emoji"),
      std::string("\x80\x80\x80 stray continuation \xC0\xAF overlong \xED\xA0\x80 surrogate"),
      "tabs\t\t\tand    spaces     \n\n\r\n",
      "special <|endoftext|> <|eot_id|> inside",
  };
  for (int k = 0; k < 50; ++k) {
    std::string s;
    const int len = static_cast<int>(rng() % 200);
    for (int i = 0; i < len; ++i) s.push_back(static_cast<char>(rng() % 256));
    texts.push_back(s);
  }
  for (const std::string& t : texts) {
    const auto ids = tok->encode(t);
    EXPECT_EQ(tok->decode_bytes(ids), t);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size());
  }
}

TEST_P(Reference, EncodingIsTheSameFromManyThreads) {
  const auto tok = load_tokenizer(kDir + GetParam() + "/tokenizer.json");
  const nlohmann::json c = cases()[GetParam()]["encode"];
  // Every repetition is checked: later ones hit the per-thread caches and
  // the cache the threads share (pieces another thread merged).
  std::vector<std::vector<int32_t>> got(c.size() * 8);
#pragma omp parallel for num_threads(4) schedule(dynamic)
  for (size_t i = 0; i < c.size() * 8; ++i)
    got[i] = tok->encode(c[i % c.size()]["text"].get<std::string>());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], c[i % c.size()]["ids"].get<std::vector<int32_t>>()) << "repetition " << i / c.size();
}

INSTANTIATE_TEST_SUITE_P(tokenizer, Reference,
                         ::testing::Values("gpt2_style", "llama3_style", "llama2_style",
                                           "metaspace_style", "metaspace_split_style"));
INSTANTIATE_TEST_SUITE_P(tokenizer, RoundTrip,
                         ::testing::Values("gpt2_style", "llama3_style", "llama2_style"));

// `data prepare` encodes a file in chunks; a later chunk continues the text,
// so a SentencePiece-style tokenizer puts no "▁" of its own before it and the
// chunks read as the whole text where they meet at a space.
TEST_P(Reference, ContinuationEncodesAsTheWholeText) {
  const auto tok = load_tokenizer(kDir + GetParam() + "/tokenizer.json");
  const std::string a = "The quick brown fox", b = " jumps over the lazy dog.";
  std::vector<int32_t> chunked = tok->encode(a);
  tok->encode_continuation_into(b, chunked);
  EXPECT_EQ(chunked, tok->encode(a + b));
  if (GetParam() == "llama2_style") {  // encode_into puts a "▁" before every text
    EXPECT_NE(tok->encode(b), (std::vector<int32_t>(chunked.begin() + static_cast<std::ptrdiff_t>(tok->encode(a).size()), chunked.end())));
  }
}

// Streaming output (sample): each token's bytes as they read after earlier
// tokens; only the start of a text loses the space the encoder put there.
TEST(tokenizer, continuation_bytes_keep_the_spaces_between_pieces) {
  const auto tok = load_tokenizer(kDir + "llama2_style/tokenizer.json");
  EXPECT_NE(tok->describe().find("SentencePiece-style"), std::string::npos);
  const std::string text = "Hello world, 中文 and 😀 x";
  const std::vector<int32_t> ids = tok->encode(text, true);
  std::string streamed;
  for (size_t i = 1; i < ids.size(); ++i) streamed += tok->continuation_bytes(ids[i]);
  EXPECT_EQ(streamed, " " + text);  // the leading "▁" the encoder added, as a space
  EXPECT_EQ(tok->continuation_bytes(ids[0]), "");  // <s> is special
  EXPECT_EQ(tok->decode(ids, true), text);
  const auto bytes_tok = load_tokenizer(kDir + "gpt2_style/tokenizer.json");
  std::string gpt;
  for (int32_t id : bytes_tok->encode(text)) gpt += bytes_tok->continuation_bytes(id);
  EXPECT_EQ(gpt, text);
}

// The cache encoding threads share: 4 threads insert and look up the same
// 20000 pieces at once; every hit is the ids inserted for that piece.
TEST(tokenizer, shared_piece_cache_never_returns_another_pieces_ids) {
  SharedPieceCache cache;
  const int kPieces = 20000;
  std::vector<std::string> pieces;
  for (int i = 0; i < kPieces; ++i) pieces.push_back("piece" + std::to_string(i * 7919 % 100003));
  int wrong = 0, hits = 0;
#pragma omp parallel for num_threads(4) schedule(dynamic, 64) reduction(+ : wrong, hits)
  for (int k = 0; k < 4 * kPieces; ++k) {
    const int i = k % kPieces;
    const std::string& p = pieces[static_cast<size_t>(i)];
    const uint64_t h = std::hash<std::string_view>{}(p);
    const int32_t want[3] = {i, i + 1, i + 2};
    uint32_t count = 0;
    if (const int32_t* ids = cache.find(p, h, &count)) {
      ++hits;
      if (count != 3 || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2]) ++wrong;
    } else {
      cache.insert(p, h, want, 3);
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(hits, 2 * kPieces);  // the later rounds find what the first inserted
}

TEST(tokenizer, lossy_utf8_replaces_maximal_subparts) {
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");                 // one cut emoji: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");           // two invalid bytes: two
  EXPECT_EQ(utf8_lossy("\xE2\x82x"), "\xEF\xBF\xBDx");                     // cut 3-byte form
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(tokenizer, the_byte_tokenizer_is_behind_the_same_seam) {
  const auto tok = load_tokenizer("bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
  const std::string s = "h\xC3\xA9!";
  const auto ids = tok->encode(s);
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 0xC3, 0xA9, '!'}));
  EXPECT_EQ(tok->decode_bytes(ids), s);
}

TEST(tokenizer, bad_files_get_clear_errors) {
  const std::string dir = ::testing::TempDir();
  const auto write = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir + name) << body;
    return dir + name;
  };
  const auto message = [](const std::string& spec) {
    try {
      load_tokenizer(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(dir + "missing.json").find("does not exist"), std::string::npos);
  EXPECT_NE(message(write("trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {")).find("is not JSON"),
            std::string::npos);
  EXPECT_NE(message(write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})"))
                .find("model type 'WordPiece' is not supported"),
            std::string::npos);
  EXPECT_NE(message(write("sp.json", R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})"))
                .find("byte-fallback BPE without the"),
            std::string::npos);
  EXPECT_NE(message(write("spnorm.json", R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})"))
                .find("normalizer 'NFKC' is not supported in a SentencePiece-style"),
            std::string::npos);
  EXPECT_NE(message(write("spdec.json", R"({"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}, "decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})"))
                .find("decoder 'WordPiece' is not supported in a SentencePiece-style"),
            std::string::npos);
  EXPECT_NE(message(write("nfc.json", R"({"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"))
                .find("normalizer 'NFC' is not supported"),
            std::string::npos);
  EXPECT_NE(message(write("merge.json", R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}})"))
                .find("merge 0 ('a' 'c') names a token that is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(message(write("re.json", R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"))
                .find("does not compile"),
            std::string::npos);
  EXPECT_NE(message(dir).find("holds no tokenizer.json"), std::string::npos);
  const auto tok = load_tokenizer(kDir + "gpt2_style/tokenizer.json");
  const std::vector<int32_t> bad = {1, 2, 99999};
  try {
    tok->decode(bad);
    ADD_FAILURE() << "decoding an id outside the vocabulary should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 99999 at position 2"), std::string::npos);
  }
}
