// `meshtrain data instruct`: instruction data (JSONL) -> masked token shards
// (token_shard.h) whose loss mask marks the tokens trained on.
//
// Each line is one example, either {"prompt": ..., "response": ...} or
// {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}.
// A chat template (chat_template.h: plain, chatml, llama2, llama3, mistral,
// or auto, which recognizes the one tokenizer_config.json names) renders it
// as segments trained on or not: the assistant contents and the tokens that
// end their turns. Consecutive segments with the same mask are encoded as one
// text (special tokens in it recognized), later ones as continuations of the
// text before (SentencePiece-style tokenizers put no "▁" of their own before
// them), so the tokens equal those of encoding the whole rendered text
// wherever a trained/untrained boundary is a token boundary of that encoding.
// A prompt/response pair is the messages [user: prompt, assistant: response].
//
// Layout: padding, not packing. Every example is its own window of seq_len
// tokens (longer ones are cut at seq_len, and dropped when nothing trained
// is left), padded with token 0 (never trained on); so no example attends to
// another and every example starts at position 0. The cost is the compute
// spent on padding, which the summary reports. An example's first token is
// never a target (nothing precedes it in its window).
//
// A seeded choice of whole examples is the validation split. Deterministic for
// a given input, options and seed, whatever the thread count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace meshtrain::data {

struct InstructOptions {
  std::vector<std::string> inputs;  // JSONL files
  std::string out_dir;
  std::string tokenizer = "bytes";  // "bytes", a tokenizer.json, or a folder holding one
  std::string chat_template = "plain";  // auto | plain | chatml | llama2 | llama3 | mistral
  int64_t seq_len = 0;              // the training window (model.seq_len); required
  std::string eos;                  // plain: a token (or text) after each response
  double val_fraction = 0.05;
  uint64_t seed = 1;
  int64_t shard_examples = 65536;   // examples per shard at most
  int threads = 0;                  // encoding threads; 0 = all cores
};

struct InstructResult {
  int64_t examples = 0, train_examples = 0, val_examples = 0;
  int64_t truncated = 0;  // longer than seq_len: cut
  int64_t dropped = 0;    // nothing trained on left after the cut (not written)
  int64_t trained_tokens = 0, tokens = 0;  // the examples' (before padding)
  int64_t padded_tokens = 0;               // windows x seq_len
  std::vector<std::string> train_shards, val_shards;
  std::string tokenizer;
  std::string chat_template;    // the built-in used (what auto recognized)
  std::string template_source;  // auto: the file its chat_template was read from
  int vocab_size = 0;
  int token_bytes = 2;
};

// One rendered, encoded example: its tokens and their loss mask.
struct EncodedExample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
};

class Tokenizer;

// Renders and encodes one JSONL line under built-in template `chat_template`
// (not auto; `where` names the line in errors).
EncodedExample encode_example(const std::string& line, const Tokenizer& tokenizer,
                              const std::string& chat_template, const std::string& eos,
                              const std::string& where);

// Throws meshtrain::Error naming the file and line for malformed JSON, a
// missing field, an unknown role or template, a conversation the template
// cannot render, inputs without examples, or (auto) a tokenizer_config.json
// that is missing or names no built-in template.
InstructResult prepare_instruct(const InstructOptions& options);

}  // namespace meshtrain::data
