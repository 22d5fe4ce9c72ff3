#include "meshtrain/data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/data/utf8.h"

namespace meshtrain::data {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// What Python's str.isspace() accepts: the Jinja templates strip with
// str.strip() (and `| trim`), so trimming must agree on every character.
bool python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    uint32_t cp = 0;
    const int n = utf8_sequence(s, begin, &cp);
    if (n == 0 || !python_space(cp)) break;
    begin += static_cast<size_t>(n);
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back to the first byte of the last character
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    uint32_t cp = 0;
    const int n = utf8_sequence(s, start, &cp);
    if (n == 0 || start + static_cast<size_t>(n) != end || !python_space(cp)) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

// Llama 2 and Mistral templates raise unless the turns alternate, starting
// with the user, after an optional first system message.
void check_alternating(const std::vector<ChatMessage>& m, size_t first, const char* name,
                       const std::string& where) {
  for (size_t i = first; i < m.size(); ++i) {
    const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
    MT_CHECK(m[i].role == want,
             "{}: the {} template needs turns that alternate user, assistant, user, ... after an "
             "optional first system message (its Jinja template refuses others); messages[{}] "
             "is '{}' where '{}' belongs",
             where, name, i, m[i].role, want);
  }
}

struct Renderer {
  RenderedChat out;
  void add(std::string text, bool trained) {
    if (!text.empty()) out.segments.push_back({std::move(text), trained});
  }
};

RenderedChat plain(const std::vector<ChatMessage>& m, const std::string& eos) {
  Renderer r;
  r.out.prefix_tokens = true;
  for (const ChatMessage& x : m) {
    const bool trained = x.role == "assistant";
    r.add(x.content, trained);
    if (trained) r.add(eos, true);
  }
  return r.out;
}

RenderedChat chatml(const std::vector<ChatMessage>& m) {
  Renderer r;
  r.out.prefix_tokens = true;
  for (const ChatMessage& x : m) {
    const bool trained = x.role == "assistant";
    r.add("<|im_start|>" + x.role + "\n", false);
    r.add(x.content, trained);
    r.add("<|im_end|>", trained);
    r.add("\n", false);
  }
  return r.out;
}

RenderedChat llama3(const std::vector<ChatMessage>& m) {
  Renderer r;
  r.add("<|begin_of_text|>", false);
  for (const ChatMessage& x : m) {
    const bool trained = x.role == "assistant";
    r.add("<|start_header_id|>" + x.role + "<|end_header_id|>\n\n", false);
    r.add(python_strip(x.content), trained);
    r.add("<|eot_id|>", trained);
  }
  return r.out;
}

RenderedChat llama2(const std::vector<ChatMessage>& m, const std::string& where) {
  const bool system = m.front().role == "system";
  const size_t first = system ? 1 : 0;
  check_alternating(m, first, "llama2", where);
  Renderer r;
  for (size_t i = first; i < m.size(); ++i) {
    if (m[i].role == "user") {
      // The system block joins the first user turn before the strip, as in the template.
      const std::string content =
          i == first && system
              ? "<<SYS>>\n" + m.front().content + "\n<</SYS>>\n\n" + m[i].content
              : m[i].content;
      r.add("<s>[INST] " + python_strip(content) + " [/INST]", false);
    } else {
      // The space before the answer is its first token's "▁" in SentencePiece
      // vocabularies, so it is trained with the answer.
      r.add(" " + python_strip(m[i].content) + " </s>", true);
    }
  }
  return r.out;
}

RenderedChat mistral(const std::vector<ChatMessage>& m, const std::string& where) {
  MT_CHECK(m.front().role != "system",
           "{}: the mistral template has no system role (Mistral-Instruct's Jinja template "
           "refuses one); fold the system text into the first user message or use llama2",
           where);
  check_alternating(m, 0, "mistral", where);
  Renderer r;
  r.add("<s>", false);
  for (const ChatMessage& x : m) {
    if (x.role == "user")
      r.add("[INST] " + x.content + " [/INST]", false);
    else
      r.add(x.content + "</s>", true);
  }
  return r.out;
}

std::string known_list() { return fmt::format("{}", fmt::join(builtin_chat_templates(), ", ")); }

// Mistral-Instruct v0.2's (and Mixtral-Instruct's) template: "[INST] " and
// " [/INST]" around the user's text and nothing but eos after the answer.
// v0.1 (eos_token + ' '), the later v0.2 revision (' [INST] ', ' ' + answer)
// and v0.3 ("[/INST]" without a space) render other text, and each has a
// literal single space or lacks " [/INST]".
bool mistral_signature(const std::string& j) {
  auto has = [&](std::string_view s) { return j.find(s) != std::string::npos; };
  return (has("'[INST] '") || has("\"[INST] \"")) && (has("' [/INST]'") || has("\" [/INST]\"")) &&
         !has("' '") && !has("\" \"") && has("eos_token");
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  MT_CHECK(f.good(), "cannot read '{}'", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tokenizer_config.json's "chat_template": a string, or [{name, template}]
// of which "default" is the chat template. Empty when the field is absent.
std::string template_of_config(const fs::path& config) {
  json j;
  try {
    j = json::parse(read_text(config));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", config.string(), e.what());
  }
  MT_CHECK(j.is_object(), "{}: a tokenizer_config.json must be a JSON object", config.string());
  if (!j.contains("chat_template") || j["chat_template"].is_null()) return "";
  const json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  MT_CHECK(t.is_array(), "{}: \"chat_template\" must be a string or a list of {{name, template}}",
           config.string());
  std::vector<std::string> names;
  for (const json& e : t) {
    MT_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() &&
                 e.contains("template") && e["template"].is_string(),
             "{}: each entry of \"chat_template\" needs string \"name\" and \"template\"",
             config.string());
    if (e["name"] == "default") return e["template"].get<std::string>();
    names.push_back(e["name"].get<std::string>());
  }
  fail("{}: \"chat_template\" lists templates named {} but none named \"default\"; pass "
       "--template NAME ({})",
       config.string(), fmt::join(names, ", "), known_list());
}

}  // namespace

const std::vector<std::string>& builtin_chat_templates() {
  static const std::vector<std::string> names = {"plain", "chatml", "llama2", "llama3", "mistral"};
  return names;
}

bool is_builtin_chat_template(const std::string& name) {
  for (const std::string& n : builtin_chat_templates())
    if (n == name) return true;
  return false;
}

RenderedChat render_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                         const std::string& eos, const std::string& where) {
  MT_CHECK(!messages.empty(), "{}: a conversation needs at least one message", where);
  if (name == "plain") return plain(messages, eos);
  if (name == "chatml") return chatml(messages);
  if (name == "llama3") return llama3(messages);
  if (name == "llama2") return llama2(messages, where);
  if (name == "mistral") return mistral(messages, where);
  fail("unknown chat template '{}' (known: {}, and auto where a tokenizer_config.json names one)",
       name, known_list());
}

std::string recognize_chat_template(const std::string& jinja, std::string* why) {
  auto has = [&](std::string_view s) { return jinja.find(s) != std::string::npos; };
  std::vector<std::string> found;
  std::string note;
  if (has("<|im_start|>")) found.push_back("chatml");
  if (has("<|start_header_id|>")) found.push_back("llama3");
  if (has("[INST]")) {
    if (has("<<SYS>>"))
      found.push_back("llama2");
    else if (mistral_signature(jinja))
      found.push_back("mistral");
    else
      note = "it writes [INST] but neither Llama 2's <<SYS>> nor Mistral-Instruct v0.2's "
             "'[INST] ' USER ' [/INST]' ANSWER eos_token (other Mistral versions render other "
             "text)";
  }
  if (found.size() == 1) return found.front();
  if (why) {
    if (found.size() > 1)
      *why = fmt::format("it has the signatures of several ({})", fmt::join(found, ", "));
    else if (!note.empty())
      *why = note;
    else
      *why = "it has none of their signatures: <|im_start|> (chatml), <|start_header_id|> "
             "(llama3), [INST] with <<SYS>> (llama2), [INST] as Mistral-Instruct v0.2 (mistral)";
  }
  return "";
}

AutoTemplate auto_chat_template(const std::string& tokenizer_spec) {
  const std::string hint = fmt::format("pass --template NAME ({})", known_list());
  MT_CHECK(tokenizer_spec != "bytes" && tokenizer_spec != "byte",
           "--template auto reads the chat template from the tokenizer_config.json beside "
           "--tokenizer, and the byte tokenizer has none; {}",
           hint);
  std::error_code ec;
  fs::path dir(tokenizer_spec);
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  const fs::path config = dir / "tokenizer_config.json";
  // Newer checkpoints keep the template in its own file beside the config.
  const fs::path jinja_file = dir / "chat_template.jinja";
  AutoTemplate out;
  std::string jinja;
  if (fs::is_regular_file(config, ec)) {
    jinja = template_of_config(config);
    out.config = config.string();
  }
  if (jinja.empty() && fs::is_regular_file(jinja_file, ec)) {
    jinja = read_text(jinja_file);
    out.config = jinja_file.string();
  }
  if (jinja.empty()) {
    if (out.config.empty())
      fail("--template auto: no tokenizer_config.json at '{}' (beside the tokenizer) to read "
           "a chat template from; {}",
           config.string(), hint);
    fail("--template auto: {} has no \"chat_template\" (nor is there a {}); {}", config.string(),
         jinja_file.filename().string(), hint);
  }
  std::string why;
  out.name = recognize_chat_template(jinja, &why);
  if (out.name.empty())
    fail("--template auto: the chat_template of {} matches no built-in template: {}. Its Jinja "
         "is not run, only recognized by signature; {} for the built-in that renders the same "
         "text",
         out.config, why, hint);
  return out;
}

}  // namespace meshtrain::data
