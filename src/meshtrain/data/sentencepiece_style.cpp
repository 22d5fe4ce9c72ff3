#include "meshtrain/data/sentencepiece_style.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/data/tokenizer_json.h"
#include "meshtrain/data/utf8.h"

namespace meshtrain::data {

using nlohmann::json;

namespace {
constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581 "▁"

// The steps of a Sequence (normalizers, pretokenizers, decoders) or the one step.
std::vector<json> steps_of(const json& j, const char* key) {
  if (json_type_of(j) == "Sequence") return j.at(key).get<std::vector<json>>();
  return {j};
}

// A Replace whose pattern is the literal `from` and whose content is `to`.
bool is_replace(const json& j, std::string_view from, std::string_view to) {
  return json_type_of(j) == "Replace" && j.contains("pattern") && j["pattern"].contains("String") &&
         j["pattern"]["String"] == from && j.value("content", "") == to;
}

bool is_metaspace(const json& j) { return json_type_of(j) == "Metaspace"; }

// The byte a token spelled "<0xHH>" stands for (the library's ByteFallback
// decoder reads either case), or -1.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return v;
}

bool valid_utf8(std::string_view s) {
  uint32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_sequence(s, i, &cp);
    if (n == 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

void replace_meta(std::string_view t, std::string& out) {
  for (size_t i = 0; i < t.size();) {
    if (t.substr(i, kMeta.size()) == kMeta) {
      out.push_back(' ');
      i += kMeta.size();
    } else {
      out.push_back(t[i++]);
    }
  }
}
}  // namespace

bool SentencePieceStyle::detect(const json& j) {
  if (j.contains("model") && j["model"].is_object() && j["model"].value("byte_fallback", false))
    return true;
  if (j.contains("normalizer") && !j["normalizer"].is_null())
    for (const json& n : steps_of(j["normalizer"], "normalizers"))
      if (json_type_of(n) == "Prepend" || is_replace(n, " ", kMeta)) return true;
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    for (const json& p : steps_of(j["pre_tokenizer"], "pretokenizers"))
      if (is_metaspace(p)) return true;
  return false;
}

SentencePieceStyle::SentencePieceStyle(const json& j, const std::vector<std::string>& vocab_text,
                                       const std::string& source) {
  byte_token_.fill(-1);
  const json& m = j.at("model");
  const bool fallback = m.value("byte_fallback", false);
  fuse_unk_ = m.value("fuse_unk", false);
  if (fallback) {
    for (size_t id = 0; id < vocab_text.size(); ++id) {
      const std::string& t = vocab_text[id];
      const int b = parse_byte_token(t);
      // Encoding looks the byte up as the library spells it: "<0x%02X>".
      if (b >= 0 && t.substr(3, 2) == fmt::format("{:02X}", b)) byte_token_[static_cast<size_t>(b)] = static_cast<int32_t>(id);
    }
  }

  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    for (const json& n : steps_of(j["normalizer"], "normalizers")) {
      if (json_type_of(n) == "Prepend") {
        MT_CHECK(n.value("prepend", "") == kMeta,
                 "tokenizer '{}': normalizer Prepend('{}') is not supported (Prepend(\"▁\") only)",
                 source, n.value("prepend", ""));
        norm_prepend_ = true;
      } else if (is_replace(n, " ", kMeta)) {
        norm_replace_ = true;
      } else {
        fail("tokenizer '{}': normalizer '{}' is not supported in a SentencePiece-style "
             "tokenizer (Prepend(\"▁\") and Replace(\" \", \"▁\") are)", source, json_type_of(n));
      }
    }
  }
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    const json& p = j["pre_tokenizer"];
    MT_CHECK(is_metaspace(p),
             "tokenizer '{}': pre-tokenizer '{}' is not supported in a SentencePiece-style "
             "tokenizer (Metaspace, or none, is)", source, json_type_of(p));
    MT_CHECK(p.value("replacement", std::string(kMeta)) == kMeta,
             "tokenizer '{}': Metaspace replacement '{}' is not supported (\"▁\" only)", source,
             p.value("replacement", ""));
    metaspace_ = true;
    split_ = p.value("split", true);
    std::string scheme = p.contains("prepend_scheme")
                             ? p["prepend_scheme"].get<std::string>()
                             : (p.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") prepend_ = Prepend::Always;
    else if (scheme == "first") prepend_ = Prepend::First;
    else if (scheme == "never") prepend_ = Prepend::Never;
    else fail("tokenizer '{}': Metaspace prepend_scheme '{}' is unknown", source, scheme);
  }
  MT_CHECK(norm_replace_ || metaspace_,
           "tokenizer '{}': byte-fallback BPE without the \"▁\" normalizer or a Metaspace "
           "pre-tokenizer is not supported (spaces would not become \"▁\")", source);

  if (j.contains("decoder") && !j["decoder"].is_null()) {
    for (const json& d : steps_of(j["decoder"], "decoders")) {
      const std::string t = json_type_of(d);
      if (is_replace(d, kMeta, " ")) {
        decode_meta_ = true;
      } else if (t == "ByteFallback") {
        decode_bytes_ = true;
      } else if (t == "Fuse") {
      } else if (t == "Strip") {
        const int32_t start = json_int32_or(d, "start", 0, source, "decoder Strip's start");
        const int32_t stop = json_int32_or(d, "stop", 0, source, "decoder Strip's stop");
        MT_CHECK(d.value("content", "") == " " && stop == 0 && start >= 0,
                 "tokenizer '{}': decoder Strip('{}', {}, {}) is not supported (leading spaces "
                 "only)", source, d.value("content", ""), start, stop);
        strip_start_ = start;
      } else if (t == "Metaspace") {
        metaspace_decoder_ = true;
      } else {
        fail("tokenizer '{}': decoder '{}' is not supported in a SentencePiece-style tokenizer "
             "(Replace(\"▁\", \" \"), ByteFallback, Fuse, Strip, Metaspace are)", source, t);
      }
    }
  }
}

void SentencePieceStyle::pieces(std::string_view stretch, Position at, std::string& scratch,
                                std::vector<std::string_view>& out) const {
  scratch.clear();
  if (stretch.empty()) return;
  if (norm_prepend_ && at != Position::Continues) scratch.append(kMeta);
  if (norm_replace_ || metaspace_) {
    for (char c : stretch) {
      if (c == ' ') scratch.append(kMeta);
      else scratch.push_back(c);
    }
  } else {
    scratch.append(stretch);
  }
  if (metaspace_ && !std::string_view(scratch).starts_with(kMeta) &&
      ((prepend_ == Prepend::Always && at != Position::Continues) ||
       (prepend_ == Prepend::First && at == Position::Start)))
    scratch.insert(0, kMeta);
  const std::string_view s(scratch);
  if (!split_ || !metaspace_) {
    out.push_back(s);
    return;
  }
  // Metaspace(split): every "▁" starts a piece (merged with what follows).
  size_t begin = 0;
  for (size_t i = s.find(kMeta, 1); i != std::string_view::npos; i = s.find(kMeta, i + 1)) {
    out.push_back(s.substr(begin, i - begin));
    begin = i;
  }
  out.push_back(s.substr(begin));
}

void SentencePieceStyle::encode_piece(const BpeModel& model, std::string_view piece,
                                      int32_t unk_id, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (model.ignore_merges()) {
    const int32_t whole = model.id_of(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(piece.size());
  bool unk_pending = false;  // the library adds an unk when the next known character comes
  uint32_t cp = 0;
  for (size_t i = 0; i < piece.size();) {
    int n = utf8_sequence(piece, i, &cp);
    if (n == 0) n = 1;  // an invalid byte is a character of its own
    const std::string_view ch = piece.substr(i, static_cast<size_t>(n));
    i += static_cast<size_t>(n);
    const int32_t id = model.id_of(ch);
    if (id >= 0) {
      if (unk_pending) syms.push_back(unk_id);
      unk_pending = false;
      syms.push_back(id);
      continue;
    }
    bool all = !ch.empty();
    for (char c : ch) all = all && byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (char c : ch) syms.push_back(byte_token_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (unk_id < 0) continue;  // no unk token: the character is dropped, as the library does
    if (unk_pending && !fuse_unk_) syms.push_back(unk_id);
    unk_pending = true;
  }
  if (unk_pending) syms.push_back(unk_id);
  model.merge(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

std::string SentencePieceStyle::decode(std::span<const int32_t> ids,
                                       const std::vector<std::string>& text,
                                       const uint8_t* skip, bool lossy) const {
  std::string out, run;  // run: consecutive byte tokens' bytes
  size_t run_tokens = 0;
  const auto flush = [&] {
    if (run_tokens == 0) return;
    if (!lossy || valid_utf8(run)) {
      out += run;
    } else {
      for (size_t k = 0; k < run_tokens; ++k) out += "\xEF\xBF\xBD";  // one U+FFFD per byte token
    }
    run.clear();
    run_tokens = 0;
  };
  bool first = true;
  for (const int32_t id : ids) {
    if (skip && skip[static_cast<size_t>(id)]) continue;
    const std::string& t = text[static_cast<size_t>(id)];
    const int b = decode_bytes_ ? parse_byte_token(t) : -1;
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      ++run_tokens;
      first = false;
      continue;
    }
    flush();
    if (metaspace_decoder_ && first) {
      for (size_t i = 0; i < t.size();) {  // the first token's "▁" are dropped
        if (std::string_view(t).substr(i, kMeta.size()) == kMeta) i += kMeta.size();
        else out.push_back(t[i++]);
      }
    } else if (decode_meta_ || metaspace_decoder_) {
      replace_meta(t, out);
    } else {
      out += t;
    }
    first = false;
  }
  flush();
  size_t cut = 0;
  while (cut < static_cast<size_t>(strip_start_) && cut < out.size() && out[cut] == ' ') ++cut;
  return out.substr(cut);
}

std::string SentencePieceStyle::continuation_bytes(int32_t id,
                                                   const std::vector<std::string>& text) const {
  const std::string& t = text[static_cast<size_t>(id)];
  const int b = decode_bytes_ ? parse_byte_token(t) : -1;
  if (b >= 0) return std::string(1, static_cast<char>(b));
  if (!decode_meta_ && !metaspace_decoder_) return t;
  std::string out;
  replace_meta(t, out);
  return out;
}

}  // namespace meshtrain::data
