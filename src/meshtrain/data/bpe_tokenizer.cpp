#include "meshtrain/data/bpe_tokenizer.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_level.h"
#include "meshtrain/data/piece_cache.h"
#include "meshtrain/data/tokenizer_json.h"

namespace meshtrain::data {

using nlohmann::json;

namespace {
std::atomic<uint64_t> next_serial{1};

bool ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// A regex matching `s` literally (Split with a "String" pattern).
std::string regex_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

constexpr size_t kCacheMaxPieceBytes = 128;
}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open tokenizer file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) fail("cannot read tokenizer file '{}'", path);
  return std::make_unique<BpeTokenizer>(ss.str(), path);
}

BpeTokenizer::BpeTokenizer(const std::string& json_text, std::string source)
    : source_(std::move(source)), serial_(next_serial.fetch_add(1)) {
  try {
    load(json_text);
  } catch (const json::exception& e) {
    fail("tokenizer '{}' is not a valid tokenizer.json: {}", source_, e.what());
  }
}

BpeTokenizer::~BpeTokenizer() = default;

void BpeTokenizer::load(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail("tokenizer '{}' is not JSON: {}", source_, e.what());
  }
  MT_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(),
           "tokenizer '{}' has no \"model\" object: not a Hugging Face tokenizer.json", source_);
  const json& m = j["model"];
  const std::string model_type = m.value("type", m.contains("merges") ? "BPE" : "?");
  MT_CHECK(model_type == "BPE",
           "tokenizer '{}': model type '{}' is not supported (BPE only: byte-level as GPT-2, "
           "Llama 3 and Qwen ship it, or SentencePiece-style as Llama 2 and Mistral do)", source_,
           model_type);
  const bool sentencepiece = SentencePieceStyle::detect(j);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    MT_CHECK(!m.contains(key) || m[key].is_null() || m[key].get<std::string>().empty(),
             "tokenizer '{}': model.{} is set, which byte-level BPE does not use; not supported",
             source_, key);
  }
  MT_CHECK(!m.contains("dropout") || m["dropout"].is_null() || m["dropout"].get<double>() == 0.0,
           "tokenizer '{}': BPE dropout is set (a training-time option); remove it to encode "
           "deterministically", source_);
  MT_CHECK(sentencepiece || !j.contains("normalizer") || j["normalizer"].is_null(),
           "tokenizer '{}': normalizer '{}' is not supported (byte-level tokenizers without a "
           "normalizer, or SentencePiece-style ones)", source_, json_type_of(j["normalizer"]));

  // The vocabulary: spelled in the byte-level alphabet, or (SentencePiece-
  // style) as the text itself with "▁" for spaces.
  MT_CHECK(m.contains("vocab") && m["vocab"].is_object(),
           "tokenizer '{}': model.vocab is missing or not an object", source_);
  std::unordered_map<std::string, int32_t> vocab_ids;
  int32_t max_id = -1;
  for (const auto& [text, idj] : m["vocab"].items()) {
    const auto id = json_integer_in(idj, 0, (int64_t{1} << 30) - 1);
    MT_CHECK(id, "tokenizer '{}': token '{}' has id {}, not an integer in [0, 2^30)", source_, text,
             idj.dump());
    vocab_ids.emplace(text, static_cast<int32_t>(*id));
    max_id = std::max(max_id, static_cast<int32_t>(*id));
  }
  MT_CHECK(max_id >= 0, "tokenizer '{}': the vocabulary is empty", source_);
  std::vector<std::string> model_bytes(static_cast<size_t>(max_id) + 1);
  token_text_.assign(static_cast<size_t>(max_id) + 1, std::string());
  std::string bytes;
  for (const auto& [text, id] : vocab_ids) {
    if (sentencepiece) {  // the model works on the text as spelled ("▁" included)
      MT_CHECK(!text.empty(), "tokenizer '{}': vocabulary entry {} is empty", source_, id);
      model_bytes[static_cast<size_t>(id)] = text;
      token_text_[static_cast<size_t>(id)] = text;
      continue;
    }
    MT_CHECK(byte_level_to_bytes(text, bytes),
             "tokenizer '{}': vocabulary entry {} ('{}') is not in the byte-level alphabet; only "
             "byte-level BPE is supported", source_, id, text);
    MT_CHECK(!bytes.empty(), "tokenizer '{}': vocabulary entry {} is empty", source_, id);
    model_bytes[static_cast<size_t>(id)] = bytes;
    token_text_[static_cast<size_t>(id)] = text;
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs.
  std::vector<BpeModel::Merge> merges;
  if (m.contains("merges")) {
    MT_CHECK(m["merges"].is_array(), "tokenizer '{}': model.merges is not a list", source_);
    merges.reserve(m["merges"].size());
    size_t rank = 0;
    for (const json& mj : m["merges"]) {
      std::string a, b;
      if (mj.is_string()) {
        const std::string s = mj.get<std::string>();
        const size_t sp = s.find(' ');
        MT_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                 "tokenizer '{}': merge {} ('{}') is not two tokens separated by a space",
                 source_, rank, s);
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        MT_CHECK(mj.is_array() && mj.size() == 2, "tokenizer '{}': merge {} is not a pair",
                 source_, rank);
        a = mj[0].get<std::string>();
        b = mj[1].get<std::string>();
      }
      const auto ia = vocab_ids.find(a), ib = vocab_ids.find(b);
      MT_CHECK(ia != vocab_ids.end() && ib != vocab_ids.end(),
               "tokenizer '{}': merge {} ('{}' '{}') names a token that is not in the vocabulary",
               source_, rank, a, b);
      merges.push_back({ia->second, ib->second});
      ++rank;
    }
  }
  int32_t unk_id = -1;
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    const auto it = vocab_ids.find(m["unk_token"].get<std::string>());
    if (it != vocab_ids.end()) unk_id = it->second;
  }
  model_ = std::make_unique<BpeModel>(model_bytes, std::move(merges),
                                      m.value("ignore_merges", false), unk_id);
  if (sentencepiece) sp_ = std::make_unique<SentencePieceStyle>(j, token_text_, source_);

  // Added tokens: matched in the text before anything else.
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      AddedToken t;
      t.id = json_int32(a.at("id"), source_, "an added token's id");
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      MT_CHECK(t.id >= 0 && t.id < (1 << 30) && !t.content.empty(),
               "tokenizer '{}': added token '{}' has id {}", source_, t.content, t.id);
      MT_CHECK(!a.value("single_word", false),
               "tokenizer '{}': added token '{}' is single_word, which is not supported", source_,
               t.content);
      max_id = std::max(max_id, t.id);
      added_.push_back(std::move(t));
    }
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& x, const AddedToken& y) {
    return x.content.size() > y.content.size();
  });
  token_bytes_.assign(static_cast<size_t>(max_id) + 1, std::string());
  token_text_.resize(static_cast<size_t>(max_id) + 1);
  special_.assign(static_cast<size_t>(max_id) + 1, 0);
  for (size_t id = 0; id < model_bytes.size(); ++id) token_bytes_[id] = model_bytes[id];
  for (const AddedToken& t : added_) {
    // As the library's ByteLevel decoder: a token spelled in the byte-level
    // alphabet decodes to those bytes, any other to its own UTF-8.
    if (sp_ || !byte_level_to_bytes(t.content, bytes)) bytes = t.content;
    token_bytes_[static_cast<size_t>(t.id)] = bytes;
    token_text_[static_cast<size_t>(t.id)] = t.content;
    special_[static_cast<size_t>(t.id)] = t.special ? 1 : 0;
    added_first_byte_[static_cast<uint8_t>(t.content[0])] = true;
  }

  // The pre-tokenizer as a list of steps; it must be byte-level somewhere.
  bool byte_level = false;
  std::function<void(const json&)> add_step = [&](const json& p) {
    const std::string type = json_type_of(p);
    if (type == "Sequence") {
      for (const json& q : p.at("pretokenizers")) add_step(q);
    } else if (type == "ByteLevel") {
      byte_level = true;
      PreStep s;
      s.prefix_space = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) s.split = std::make_unique<RegexSplitter>(kGpt2SplitPattern);
      if (s.split || s.prefix_space) steps_.push_back(std::move(s));
    } else if (type == "Split") {
      const json& pat = p.at("pattern");
      MT_CHECK(p.value("behavior", "Isolated") == "Isolated" && !p.value("invert", false),
               "tokenizer '{}': Split with behavior '{}'{} is not supported (Isolated only)",
               source_, p.value("behavior", "?"), p.value("invert", false) ? ", inverted" : "");
      std::string regex;
      if (pat.contains("Regex")) {
        regex = pat["Regex"].get<std::string>();
      } else {
        regex = regex_literal(pat.at("String").get<std::string>());
      }
      PreStep s;
      s.split = std::make_unique<RegexSplitter>(regex);
      steps_.push_back(std::move(s));
    } else if (type == "Digits") {
      PreStep s;
      s.split = std::make_unique<RegexSplitter>(p.value("individual_digits", false) ? "\\p{N}"
                                                                                    : "\\p{N}+");
      steps_.push_back(std::move(s));
    } else {
      fail("tokenizer '{}': pre-tokenizer '{}' is not supported (ByteLevel, Split, Digits and "
           "Sequence are)", source_, type);
    }
  };
  if (!sp_ && j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    add_step(j["pre_tokenizer"]);
  MT_CHECK(byte_level || sp_,
           "tokenizer '{}' has neither a ByteLevel pre-tokenizer (byte-level BPE: GPT-2, Llama 3, "
           "Qwen) nor byte fallback, the \"▁\" normalizer or a Metaspace pre-tokenizer "
           "(SentencePiece-style BPE: Llama 2, Mistral)", source_);

  if (!sp_ && j.contains("decoder") && !j["decoder"].is_null()) {
    const json& d = j["decoder"];
    bool ok = json_type_of(d) == "ByteLevel";
    if (json_type_of(d) == "Sequence") {
      ok = true;
      for (const json& q : d.at("decoders")) ok = ok && json_type_of(q) == "ByteLevel";
    }
    MT_CHECK(ok, "tokenizer '{}': decoder '{}' is not supported (ByteLevel only)", source_,
             json_type_of(d));
  }

  // Special tokens around one sequence, from the post-processor.
  const auto id_of_special = [&](const std::string& content) {
    const auto it = std::find_if(added_.begin(), added_.end(),
                                 [&](const AddedToken& t) { return t.content == content; });
    if (it != added_.end()) return it->id;
    const auto v = vocab_ids.find(content);
    MT_CHECK(v != vocab_ids.end(), "tokenizer '{}': post-processor token '{}' is not a token",
             source_, content);
    return v->second;
  };
  std::function<void(const json&)> add_post = [&](const json& p) {
    const std::string type = json_type_of(p);
    if (type == "Sequence") {
      for (const json& q : p.at("processors")) add_post(q);
    } else if (type == "ByteLevel") {
      // offsets only
    } else if (type == "TemplateProcessing") {
      bool after = false;
      for (const json& item : p.at("single")) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        std::vector<int32_t> ids;
        const json& st = p.at("special_tokens");
        if (st.contains(name)) {
          const json& idsj = st[name].at("ids");
          MT_CHECK(idsj.is_array(), "tokenizer '{}': special token {}'s ids are not a list", source_, name);
          for (const json& v : idsj) ids.push_back(json_int32(v, source_, "a special token id"));
        } else {
          ids.push_back(id_of_special(name));
        }
        auto& dst = after ? suffix_ : prefix_;
        dst.insert(dst.end(), ids.begin(), ids.end());
      }
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      prefix_.push_back(json_int32(p.at("cls").at(1), source_, "the post-processor's cls id"));
      suffix_.push_back(json_int32(p.at("sep").at(1), source_, "the post-processor's sep id"));
    } else {
      fail("tokenizer '{}': post-processor '{}' is not supported", source_, type);
    }
  };
  if (j.contains("post_processor") && !j["post_processor"].is_null()) add_post(j["post_processor"]);
  for (int32_t id : prefix_) MT_CHECK(id >= 0 && id <= max_id, "tokenizer '{}': post-processor id {} is not a token", source_, id);
  for (int32_t id : suffix_) MT_CHECK(id >= 0 && id <= max_id, "tokenizer '{}': post-processor id {} is not a token", source_, id);
}

std::string BpeTokenizer::describe() const {
  return fmt::format("{} BPE, {} tokens ({} added), from {}",
                     sp_ ? "SentencePiece-style" : "byte-level", vocab_size(), added_.size(),
                     source_);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (sp_) {
    sp_->encode_piece(*model_, piece, model_->unk_id(), out);
  } else {
    model_->encode_piece(piece, out);
  }
}

PieceCache& BpeTokenizer::thread_cache() const {
  thread_local PieceCache cache;
  if (cache.serial != serial_) {
    cache.clear();
    cache.serial = serial_;
  }
  return cache;
}

void BpeTokenizer::encode_piece_cached(std::string_view piece, std::vector<int32_t>& out) const {
  encode_keyed(PieceKey::of(piece), thread_cache(), out);
}

void BpeTokenizer::encode_pieces(std::span<const std::string_view> pieces,
                                 std::vector<int32_t>& out) const {
  // Most lookups are of a handful of common words, but the rest miss the
  // CPU caches; fetching the slots a few pieces ahead overlaps those misses.
  constexpr size_t kAhead = 8;
  PieceCache& cache = thread_cache();
  std::array<PieceKey, kAhead> ahead;
  const size_t n = pieces.size();
  for (size_t j = 0; j < std::min(n, kAhead); ++j) {
    ahead[j] = PieceKey::of(pieces[j]);
    cache.prefetch(ahead[j]);
  }
  for (size_t j = 0; j < n; ++j) {
    PieceKey& slot = ahead[j % kAhead];
    const PieceKey key = slot;
    if (j + kAhead < n) {
      slot = PieceKey::of(pieces[j + kAhead]);
      cache.prefetch(slot);
    }
    encode_keyed(key, cache, out);
  }
}

void BpeTokenizer::encode_keyed(const PieceKey& key, PieceCache& cache,
                                std::vector<int32_t>& out) const {
  const std::string_view piece = key.piece;
  if (piece.size() > kCacheMaxPieceBytes) {
    encode_piece(piece, out);
    return;
  }
  uint32_t count = 0;
  if (const int32_t* ids = cache.find(key, &count)) {
    if (count == 1) out.push_back(ids[0]);  // most words are one token
    else out.insert(out.end(), ids, ids + count);
    return;
  }
  // With one encoding thread there is nobody to share merges with.
  const bool shared = omp_in_parallel();
  if (shared) {
    std::call_once(shared_once_, [this] { shared_ = std::make_unique<SharedPieceCache>(); });
    if (const int32_t* ids = shared_->find(piece, key.hash, &count)) {  // another thread merged it
      cache.insert(key, ids, count);
      out.insert(out.end(), ids, ids + count);
      return;
    }
  }
  const size_t start = out.size();
  encode_piece(piece, out);
  const auto n = static_cast<uint32_t>(out.size() - start);
  cache.insert(key, out.data() + start, n);
  if (shared) shared_->insert(piece, key.hash, out.data() + start, n);
}

void BpeTokenizer::encode_segment(std::string_view text, size_t step,
                                  std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    encode_piece_cached(text, out);
    return;
  }
  const PreStep& s = steps_[step];
  std::string spaced;
  if (s.prefix_space && text[0] != ' ') {
    spaced.reserve(text.size() + 1);
    spaced.push_back(' ');
    spaced.append(text);
    text = spaced;
  }
  if (!s.split) {
    encode_segment(text, step + 1, out);
    return;
  }
  std::vector<std::string_view> pieces;
  s.split->split(text, pieces);
  if (step + 1 == steps_.size()) {  // no step after this one: the pieces are final
    encode_pieces(pieces, out);
    return;
  }
  for (std::string_view p : pieces) encode_segment(p, step + 1, out);
}

void BpeTokenizer::encode_stretch(std::string_view text, SentencePieceStyle::Position at,
                                  std::vector<int32_t>& out) const {
  if (!sp_) {
    encode_segment(text, 0, out);
    return;
  }
  std::string scratch;
  std::vector<std::string_view> pieces;
  sp_->pieces(text, at, scratch, pieces);
  for (std::string_view p : pieces) encode_piece_cached(p, out);
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  encode_text(text, false, out);
}

void BpeTokenizer::encode_continuation_into(std::string_view text,
                                            std::vector<int32_t>& out) const {
  encode_text(text, true, out);
}

void BpeTokenizer::encode_text(std::string_view text, bool continues,
                               std::vector<int32_t>& out) const {
  using Position = SentencePieceStyle::Position;
  const auto where = [&](size_t seg) {
    return seg != 0 ? Position::Inside : continues ? Position::Continues : Position::Start;
  };
  size_t seg = 0, i = 0;
  while (i < text.size()) {
    if (!added_first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    const std::string_view rest = text.substr(i);
    const AddedToken* hit = nullptr;
    for (const AddedToken& t : added_) {  // longest first
      if (rest.starts_with(t.content)) {
        hit = &t;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + hit->content.size();
    if (hit->lstrip)
      while (begin > seg && ascii_space(text[begin - 1])) --begin;
    if (hit->rstrip)
      while (end < text.size() && ascii_space(text[end])) ++end;
    encode_stretch(text.substr(seg, begin - seg), where(seg), out);
    out.push_back(hit->id);
    seg = i = end;
  }
  encode_stretch(text.substr(seg), where(seg), out);
}

void BpeTokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    MT_CHECK(id >= 0 && id < vocab_size() && !token_bytes_[static_cast<size_t>(id)].empty(),
             "token id {} at position {} is not in the tokenizer's vocabulary ({} ids, {})", id,
             i, vocab_size(), source_);
  }
}

std::string BpeTokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  check_ids(ids);
  if (sp_) {
    return sp_->decode(ids, token_text_, skip_special ? special_.data() : nullptr, false);
  }
  std::string out;
  for (const int32_t id : ids) {
    if (skip_special && special_[static_cast<size_t>(id)]) continue;
    out += token_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  if (!sp_) return Tokenizer::decode(ids, skip_special);
  check_ids(ids);
  return sp_->decode(ids, token_text_, skip_special ? special_.data() : nullptr, true);
}

std::string BpeTokenizer::continuation_bytes(int32_t id) const {
  check_ids(std::span<const int32_t>(&id, 1));
  if (special_[static_cast<size_t>(id)]) return {};
  if (sp_) return sp_->continuation_bytes(id, token_text_);
  return token_bytes_[static_cast<size_t>(id)];
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  for (size_t id = 0; id < token_text_.size(); ++id)
    if (token_text_[id] == token) return static_cast<int32_t>(id);
  const int32_t by_bytes = model_->id_of(token);
  if (by_bytes >= 0) return by_bytes;
  return std::nullopt;
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && special_[static_cast<size_t>(id)];
}

}  // namespace meshtrain::data
