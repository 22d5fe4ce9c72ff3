// test-links: mt_data
// Chat templates of `data instruct` (data/chat_template.h) against the
// `transformers` library: tools/make_chat_template_fixtures.py rendered
// conversations with the real Jinja templates (Llama-2-chat, Llama 3
// instruct, ChatML, Mistral-Instruct v0.2) and tokenized them; our tokens must
// equal those ids exactly, and the loss mask must cover exactly the assistant
// contents and the tokens ending their turns (by the library's offsets).
// `--template auto` recognizes each fixture's tokenizer_config.json, and an
// unknown template, a missing config and an unknown name are clear errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "error_of.h"
#include "meshtrain/data/chat_template.h"
#include "meshtrain/data/instruct_prepare.h"
#include "meshtrain/data/tokenizer.h"
#include "test_paths.h"

using namespace meshtrain::data;
using meshtrain::testing::error_of;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string kDir = std::string(MESHTRAIN_SOURCE_DIR) + "/tests/fixtures/tokenizers/";

const json& chat_cases() {
  static const json j = [] {
    std::ifstream in(kDir + "chat_cases.json");
    return json::parse(in);
  }();
  return j;
}

const Tokenizer& fixture(const std::string& kind) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[kind];
  if (!t) t = load_tokenizer(kDir + kind + "/tokenizer.json");
  return *t;
}

std::string line_of(const json& messages) { return json{{"messages", messages}}.dump(); }

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "mt_chat_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  // A tokenizer folder: the llama2_style tokenizer and this config.
  std::string with_config(const json& config) const {
    fs::copy_file(kDir + "llama2_style/tokenizer.json", path / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
    std::ofstream(path / "tokenizer_config.json") << config.dump();
    return path.string();
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(chat_template, tokens_and_mask_equal_the_reference) {
  std::map<std::string, int> per_template;
  int n = 0;
  for (const json& c : chat_cases()["cases"]) {
    const std::string kind = c["tokenizer"], tmpl = c["template"];
    const std::string where = fmt::format("case {} ({}, {})", n++, kind, tmpl);
    const EncodedExample e = encode_example(line_of(c["messages"]), fixture(kind), tmpl, "", where);
    EXPECT_EQ(e.tokens, c["ids"].get<std::vector<int32_t>>()) << where;
    std::vector<uint8_t> mask;
    for (char m : c["mask"].get<std::string>()) mask.push_back(m == '1');
    mask[0] = 0;  // an example's first token is never a target
    EXPECT_EQ(e.mask, mask) << where;
    ++per_template[tmpl];
  }
  for (const char* t : {"llama2", "llama3", "chatml", "mistral"}) EXPECT_GE(per_template[t], 3) << t;
}

TEST(chat_template, the_mask_is_the_answer_and_its_end_token) {
  // Byte-level: the trained tokens decode to the answers and their end tokens.
  const Tokenizer& tok = fixture("chatml_style");
  const json msgs = json::array({{{"role", "user"}, {"content", "Hi"}},
                                 {{"role", "assistant"}, {"content", "Hello there."}},
                                 {{"role", "user"}, {"content", "Bye"}},
                                 {{"role", "assistant"}, {"content", "Bye!"}}});
  const EncodedExample e = encode_example(line_of(msgs), tok, "chatml", "", "x");
  std::vector<int32_t> trained, rest;
  for (size_t i = 0; i < e.tokens.size(); ++i) (e.mask[i] ? trained : rest).push_back(e.tokens[i]);
  EXPECT_EQ(tok.decode_bytes(trained, false), "Hello there.<|im_end|>Bye!<|im_end|>");
  EXPECT_EQ(tok.decode_bytes(rest, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n\n<|im_start|>user\nBye"
            "<|im_end|>\n<|im_start|>assistant\n\n");
  // Llama 2: each answer (with the space before it, its first token's "▁")
  // and its </s>; the [INST] turns are not trained.
  const Tokenizer& sp = fixture("llama2_style");
  const EncodedExample l = encode_example(line_of(msgs), sp, "llama2", "", "x");
  const int32_t eos = *sp.token_id("</s>"), bos = *sp.token_id("<s>");
  int trained_eos = 0, trained_bos = 0;
  for (size_t i = 0; i < l.tokens.size(); ++i) {
    trained_eos += l.mask[i] && l.tokens[i] == eos;
    trained_bos += l.mask[i] && l.tokens[i] == bos;
  }
  EXPECT_EQ(trained_eos, 2);
  EXPECT_EQ(trained_bos, 0);
  EXPECT_EQ(l.tokens.back(), eos);
  EXPECT_EQ(l.mask.back(), 1);
}

TEST(chat_template, sentencepiece_pieces_continue_the_text_before) {
  // plain puts the texts one after the other: the response gets no "▁" of
  // its own, so prompt + response encodes as the joined text does.
  for (const char* kind : {"llama2_style", "metaspace_style", "gpt2_style", "llama3_style"}) {
    const Tokenizer& tok = fixture(kind);
    const EncodedExample e =
        encode_example(R"({"prompt": "Hello there,", "response": " my friend."})", tok, "plain",
                       "", kind);
    EXPECT_EQ(e.tokens, tok.encode("Hello there, my friend.", true)) << kind;
  }
  // After a special token the next text is encoded as it reads after it (the
  // legacy Llama 2 normalizer puts a "▁" there).
  const Tokenizer& sp = fixture("llama2_style");
  const EncodedExample e =
      encode_example(R"({"messages": [{"role": "user", "content": "A"}, {"role": "assistant",
                     "content": " B"}, {"role": "user", "content": "C"}]})",
                     sp, "plain", "</s>", "x");
  EXPECT_EQ(e.tokens, sp.encode("A B</s>C", true));
}

TEST(chat_template, auto_recognizes_each_fixture_template) {
  const std::map<std::string, std::string> expect = {
      {"llama2_style", "llama2"}, {"llama3_style", "llama3"}, {"chatml_style", "chatml"}};
  for (const auto& [kind, name] : expect) {
    for (const std::string& spec : {kDir + kind, kDir + kind + "/tokenizer.json"}) {
      const AutoTemplate a = auto_chat_template(spec);
      EXPECT_EQ(a.name, name) << spec;
      EXPECT_TRUE(a.config.ends_with(kind + "/tokenizer_config.json")) << a.config;
    }
  }
  for (const auto& [name, jinja] : chat_cases()["templates"].items())
    EXPECT_EQ(recognize_chat_template(jinja.get<std::string>()), name);
  // Through prepare_instruct, which reports what it recognized.
  TempDir d;
  const fs::path jsonl = d.path / "chat.jsonl";
  std::ofstream(jsonl) << R"({"prompt": "What is 2+2?", "response": "4"})" << "\n";
  InstructOptions o;
  o.inputs = {jsonl.string()};
  o.out_dir = (d.path / "out").string();
  o.tokenizer = kDir + "llama2_style";
  o.chat_template = "auto";
  o.seq_len = 64;
  o.val_fraction = 0;
  const InstructResult r = prepare_instruct(o);
  EXPECT_EQ(r.chat_template, "llama2");
  EXPECT_TRUE(r.template_source.ends_with("llama2_style/tokenizer_config.json"));
  EXPECT_EQ(r.examples, 1);
}

TEST(chat_template, auto_reads_mistral_a_template_list_and_chat_template_jinja) {
  const json& t = chat_cases()["templates"];
  {
    TempDir d;
    EXPECT_EQ(auto_chat_template(d.with_config({{"chat_template", t["mistral"]}})).name, "mistral");
  }
  {
    TempDir d;
    const json list = json::array({{{"name", "tool_use"}, {"template", t["chatml"]}},
                                   {{"name", "default"}, {"template", t["llama3"]}}});
    EXPECT_EQ(auto_chat_template(d.with_config({{"chat_template", list}})).name, "llama3");
    const json no_default = json::array({{{"name", "tool_use"}, {"template", t["chatml"]}}});
    const std::string err =
        error_of([&] { auto_chat_template(d.with_config({{"chat_template", no_default}})); });
    EXPECT_TRUE(has(err, "none named \"default\"")) << err;
    EXPECT_TRUE(has(err, "tokenizer_config.json")) << err;
  }
  {
    TempDir d;
    const std::string dir = d.with_config({{"eos_token", "</s>"}});
    std::ofstream(d.path / "chat_template.jinja") << t["llama2"].get<std::string>();
    const AutoTemplate a = auto_chat_template(dir);
    EXPECT_EQ(a.name, "llama2");
    EXPECT_TRUE(a.config.ends_with("chat_template.jinja"));
  }
}

TEST(chat_template, auto_errors_name_the_file_and_say_to_pass_a_template) {
  // An unknown Jinja template (Zephyr's <|user|> format).
  {
    TempDir d;
    const std::string zephyr =
        "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + "
        "message['content'] + eos_token }}{% elif message['role'] == 'assistant' %}{{ "
        "'<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}{% endfor %}";
    const std::string err =
        error_of([&] { auto_chat_template(d.with_config({{"chat_template", zephyr}})); });
    EXPECT_TRUE(has(err, (d.path / "tokenizer_config.json").string())) << err;
    EXPECT_TRUE(has(err, "matches no built-in")) << err;
    EXPECT_TRUE(has(err, "not run")) << err;
    EXPECT_TRUE(has(err, "--template NAME")) << err;
  }
  // Mistral v0.1 ends each answer with eos_token + ' ': other text than v0.2.
  {
    TempDir d;
    std::string v01 = chat_cases()["templates"]["mistral"];
    v01.replace(v01.find("eos_token}}"), 11, "eos_token + ' ' }}");
    const std::string err =
        error_of([&] { auto_chat_template(d.with_config({{"chat_template", v01}})); });
    EXPECT_TRUE(has(err, "[INST]")) << err;
    EXPECT_TRUE(has(err, "--template NAME")) << err;
  }
  // Two signatures at once.
  {
    TempDir d;
    const std::string err = error_of([&] {
      auto_chat_template(d.with_config({{"chat_template", "<|im_start|> <|start_header_id|>"}}));
    });
    EXPECT_TRUE(has(err, "several (chatml, llama3)")) << err;
  }
  // A config without chat_template, no config at all, and the byte tokenizer.
  {
    TempDir d;
    const std::string err =
        error_of([&] { auto_chat_template(d.with_config({{"eos_token", "</s>"}})); });
    EXPECT_TRUE(has(err, (d.path / "tokenizer_config.json").string())) << err;
    EXPECT_TRUE(has(err, "has no \"chat_template\"")) << err;
    EXPECT_TRUE(has(err, "--template NAME")) << err;
  }
  const std::string missing = error_of([] { auto_chat_template(kDir + "gpt2_style/tokenizer.json"); });
  EXPECT_TRUE(has(missing, "no tokenizer_config.json at '" + kDir + "gpt2_style/tokenizer_config.json'"))
      << missing;
  EXPECT_TRUE(has(missing, "--template NAME")) << missing;
  EXPECT_TRUE(has(error_of([] { auto_chat_template("bytes"); }), "byte tokenizer has none"));
  // An unknown --template name lists the known ones.
  InstructOptions o;
  o.inputs = {"unused.jsonl"};
  o.seq_len = 16;
  o.chat_template = "vicuna";
  EXPECT_TRUE(has(error_of([&] { prepare_instruct(o); }),
                  "unknown chat template 'vicuna' (known: auto, plain, chatml, llama2, llama3, "
                  "mistral)"));
}

TEST(chat_template, conversations_a_template_cannot_render_are_errors) {
  const Tokenizer& sp = fixture("llama2_style");
  const std::string assistant_first =
      R"({"messages": [{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "?"}]})";
  const std::string err = error_of([&] { encode_example(assistant_first, sp, "llama2", "", "f.jsonl:2"); });
  EXPECT_TRUE(has(err, "f.jsonl:2: the llama2 template needs turns that alternate")) << err;
  EXPECT_TRUE(has(err, "messages[0] is 'assistant' where 'user' belongs")) << err;
  const std::string system =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "?"}]})";
  EXPECT_TRUE(has(error_of([&] { encode_example(system, sp, "mistral", "", "f:3"); }),
                  "f:3: the mistral template has no system role"));
  // A system message is fine for llama2 (its <<SYS>> block), and a second one is not.
  EXPECT_NO_THROW(encode_example(system, sp, "llama2", "", "f:4"));
  const std::string two_systems =
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "system", "content": "T"}]})";
  EXPECT_TRUE(has(error_of([&] { encode_example(two_systems, sp, "llama2", "", "f:5"); }),
                  "messages[1] is 'system' where 'user' belongs"));
}
