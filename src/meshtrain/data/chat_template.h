// The chat templates of `data instruct`: a conversation rendered as the text a
// model's chat template gives, cut into segments that are trained on or not.
//
// Built-ins (the Jinja templates they reproduce are in
// tools/make_chat_template_fixtures.py; content "trimmed" is Python's strip()):
//   plain    each message's content as it is, `eos` after each response
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n                (Qwen, Hermes)
//   llama3   <|begin_of_text|>, then <|start_header_id|>ROLE<|end_header_id|>\n\n
//            CONTENT(trimmed)<|eot_id|>                       (Llama 3 instruct)
//   llama2   <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER(trimmed) [/INST]
//            ASSISTANT(trimmed) </s>, "<s>[INST] ..." again per turn (Llama-2-chat)
//   mistral  <s>[INST] USER [/INST]ASSISTANT</s>[INST] ... (Mistral-7B-Instruct
//            v0.2, Mixtral-8x7B-Instruct; no system role)
// Trained: each assistant content with the token that ends its turn.
//
// `auto` reads the chat_template of the tokenizer's tokenizer_config.json and
// recognizes the built-in it renders by signature text; the Jinja is never run.
#pragma once
#include <string>
#include <vector>

namespace meshtrain::data {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct ChatSegment {
  std::string text;
  bool trained = false;
};

struct RenderedChat {
  bool prefix_tokens = false;  // the tokenizer's prefix ids (BOS) come first (plain, chatml)
  std::vector<ChatSegment> segments;  // in order; encode consecutive ones as one text
};

// "plain, chatml, llama2, llama3, mistral": the names render_chat takes.
const std::vector<std::string>& builtin_chat_templates();
bool is_builtin_chat_template(const std::string& name);

// Renders `messages` under built-in `name`; `eos` is plain's end-of-response
// text. Throws meshtrain::Error prefixed by `where` for an unknown template or
// a conversation the template cannot render (llama2/mistral: roles must
// alternate user/assistant after an optional first system message, which
// mistral refuses).
RenderedChat render_chat(const std::string& name, const std::vector<ChatMessage>& messages,
                         const std::string& eos, const std::string& where);

// The built-in whose text a Jinja chat template renders, by signature:
// <|im_start|> -> chatml, <|start_header_id|> -> llama3, [INST] with <<SYS>>
// -> llama2, [INST] as Mistral-Instruct v0.2 writes it -> mistral. Empty when
// none (or several) match; `why` then says what was seen.
std::string recognize_chat_template(const std::string& jinja, std::string* why = nullptr);

struct AutoTemplate {
  std::string name;    // the recognized built-in
  std::string config;  // the tokenizer_config.json it was read from
};

// `--template auto`: reads tokenizer_config.json beside the tokenizer file (or
// in the tokenizer folder), takes its "chat_template" (a string, or the entry
// named "default" of a list of {name, template}) and recognizes it. Throws
// meshtrain::Error naming the file when there is none, it has no template, or
// the template matches no built-in; the message says to pass --template NAME.
AutoTemplate auto_chat_template(const std::string& tokenizer_spec);

}  // namespace meshtrain::data
