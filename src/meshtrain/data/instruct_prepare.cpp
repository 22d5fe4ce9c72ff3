#include "meshtrain/data/instruct_prepare.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <span>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/data/chat_template.h"
#include "meshtrain/data/text_prepare.h"
#include "meshtrain/data/token_shard.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<ChatMessage> messages_of(const json& j, const std::string& where) {
  MT_CHECK(j.is_object(), "{}: an example must be a JSON object", where);
  std::vector<ChatMessage> out;
  if (j.contains("messages")) {
    const json& m = j["messages"];
    MT_CHECK(m.is_array() && !m.empty(), "{}: \"messages\" must be a non-empty array", where);
    for (size_t i = 0; i < m.size(); ++i) {
      const json& x = m[i];
      MT_CHECK(x.is_object() && x.contains("role") && x["role"].is_string() &&
                   x.contains("content") && x["content"].is_string(),
               "{}: messages[{}] needs string \"role\" and \"content\"", where, i);
      const std::string role = x["role"].get<std::string>();
      MT_CHECK(role == "system" || role == "user" || role == "assistant",
               "{}: messages[{}] has role '{}' (known: system, user, assistant)", where, i, role);
      out.push_back({role, x["content"].get<std::string>()});
    }
    return out;
  }
  const char* response = j.contains("response") ? "response" : "completion";
  MT_CHECK(j.contains("prompt") && j["prompt"].is_string() && j.contains(response) &&
               j[response].is_string(),
           "{}: an example needs string \"prompt\" and \"response\" fields, or \"messages\"", where);
  out.push_back({"user", j["prompt"].get<std::string>()});
  out.push_back({"assistant", j[response].get<std::string>()});
  return out;
}

}  // namespace

EncodedExample encode_example(const std::string& line, const Tokenizer& tok,
                              const std::string& tmpl, const std::string& eos,
                              const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", where, e.what());
  }
  const RenderedChat chat = render_chat(tmpl, messages_of(j, where), eos, where);
  EncodedExample ex;
  if (chat.prefix_tokens) {
    ex.tokens = tok.prefix_tokens();
    ex.mask.assign(ex.tokens.size(), 0);
  }
  // Consecutive segments with the same mask are one text, so they encode as
  // the whole rendered text does. A later text continues the one before: when
  // that ended with a special token, the text is encoded after it (and its id
  // dropped), as whole-text encoding sees it (SentencePiece-style tokenizers
  // put a "▁" before text that follows an added token, and an rstrip token
  // takes the spaces after it); otherwise as a continuation (no "▁" of its
  // own). So the tokens equal the whole text's wherever a trained/untrained
  // boundary is a token boundary there.
  const std::vector<ChatSegment>& seg = chat.segments;
  std::vector<int32_t> after;
  bool first = true;
  for (size_t i = 0; i < seg.size();) {
    std::string text;
    const bool trained = seg[i].trained;
    for (; i < seg.size() && seg[i].trained == trained; ++i) text += seg[i].text;
    const int32_t last = ex.tokens.empty() ? -1 : ex.tokens.back();
    after.clear();
    if (!first && last >= 0 && tok.is_special(last))
      tok.encode_into(tok.decode_bytes(std::span<const int32_t>(&last, 1)) + text, after);
    if (!after.empty() && after.front() == last)
      ex.tokens.insert(ex.tokens.end(), after.begin() + 1, after.end());
    else if (first)
      tok.encode_into(text, ex.tokens);
    else
      tok.encode_continuation_into(text, ex.tokens);
    first = false;
    ex.mask.resize(ex.tokens.size(), trained ? 1 : 0);
  }
  if (!ex.mask.empty()) ex.mask[0] = 0;  // nothing precedes the first token in its window
  return ex;
}

InstructResult prepare_instruct(const InstructOptions& o) {
  MT_CHECK(!o.inputs.empty(), "data instruct needs at least one --input JSONL file");
  MT_CHECK(o.seq_len >= 2, "--seq-len must be the training window (model.seq_len), >= 2; got {}",
           o.seq_len);
  MT_CHECK(o.val_fraction >= 0 && o.val_fraction < 1, "--val-fraction must be in [0, 1), got {}",
           o.val_fraction);
  MT_CHECK(o.shard_examples >= 1, "--shard-examples must be >= 1, got {}", o.shard_examples);
  if (o.chat_template != "auto" && !is_builtin_chat_template(o.chat_template))
    fail("unknown chat template '{}' (known: auto, {})", o.chat_template,
         fmt::join(builtin_chat_templates(), ", "));
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(o.tokenizer);
  InstructResult r;
  r.chat_template = o.chat_template;
  if (o.chat_template == "auto") {
    const AutoTemplate a = auto_chat_template(o.tokenizer);
    r.chat_template = a.name;
    r.template_source = a.config;
  }
  r.tokenizer = tok->describe();
  r.vocab_size = tok->vocab_size();
  r.token_bytes = r.vocab_size > 65536 ? 4 : 2;

  // The lines (and where they came from), read once.
  std::vector<std::string> lines, where;
  for (const std::string& path : o.inputs) {
    std::ifstream f(path);
    MT_CHECK(f.good(), "cannot read instruction data '{}'", path);
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      lines.push_back(std::move(line));
      where.push_back(fmt::format("{}:{}", path, n));
    }
  }
  MT_CHECK(!lines.empty(), "the instruction data ({}) holds no examples", fmt::join(o.inputs, ", "));

  // Encoded in parallel; the first error (in line order) is thrown.
  const int64_t n = static_cast<int64_t>(lines.size());
  std::vector<EncodedExample> ex(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    try {
      ex[i] = encode_example(lines[i], *tok, r.chat_template, o.eos, where[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);

  // Cut, drop, split, lay out: one example per window, padded with token 0.
  const int64_t T = o.seq_len;
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < n; ++i) {
    EncodedExample& e = ex[i];
    r.tokens += static_cast<int64_t>(e.tokens.size());
    if (static_cast<int64_t>(e.tokens.size()) > T) {
      ++r.truncated;
      e.tokens.resize(static_cast<size_t>(T));
      e.mask.resize(static_cast<size_t>(T));
    }
    const int64_t trained = std::count(e.mask.begin(), e.mask.end(), uint8_t{1});
    if (trained == 0) {
      ++r.dropped;
      continue;
    }
    r.trained_tokens += trained;
    kept.push_back(i);
  }
  MT_CHECK(!kept.empty(), "none of the {} examples has a trained token within seq_len {} (all "
           "{} dropped)", n, T, r.dropped);
  r.examples = static_cast<int64_t>(kept.size());
  const std::vector<bool> is_val = choose_val_chunks(r.examples, o.val_fraction, o.seed);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  MT_CHECK(!ec, "cannot create '{}': {}", o.out_dir, ec.message());
  for (bool val : {false, true}) {
    const std::string prefix = val ? "val" : "train";
    std::vector<int32_t> tokens;
    std::vector<uint8_t> mask;
    int64_t in_shard = 0, shard = 0;
    auto flush = [&] {
      if (in_shard == 0) return;
      tokens.push_back(0);  // the last window's T + 1st token (never trained on)
      mask.push_back(0);
      const std::string path = shard_path(o.out_dir, prefix, shard++);
      write_masked_shard(path, tokens, mask, r.token_bytes, T);
      (val ? r.val_shards : r.train_shards).push_back(path);
      tokens.clear(), mask.clear(), in_shard = 0;
    };
    for (size_t k = 0; k < kept.size(); ++k) {
      if (is_val[k] != val) continue;
      const EncodedExample& e = ex[static_cast<size_t>(kept[k])];
      tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
      mask.insert(mask.end(), e.mask.begin(), e.mask.end());
      tokens.resize(tokens.size() + static_cast<size_t>(T) - e.tokens.size(), 0);
      mask.resize(tokens.size(), 0);
      ++(val ? r.val_examples : r.train_examples);
      r.padded_tokens += T;
      if (++in_shard == o.shard_examples) flush();
    }
    flush();
    // Shards a previous, larger run left behind would join a glob.
    for (int64_t s = shard;; ++s) {
      const std::string stale = shard_path(o.out_dir, prefix, s);
      if (!fs::exists(stale)) break;
      fs::remove(stale);
    }
  }
  // The tokenizer beside the shards, for generation and inspection.
  if (o.tokenizer != "bytes") {
    fs::path src(o.tokenizer);
    if (fs::is_directory(src)) src /= "tokenizer.json";
    fs::copy_file(src, fs::path(o.out_dir) / "tokenizer.json", fs::copy_options::overwrite_existing,
                  ec);
  }
  return r;
}

}  // namespace meshtrain::data
