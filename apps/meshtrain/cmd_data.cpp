// `meshtrain data prepare|synth|inspect`: make and examine token shards.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_tokenizer.h"
#include "meshtrain/data/instruct_prepare.h"
#include "meshtrain/data/synth_dataset.h"
#include "meshtrain/data/text_prepare.h"
#include "meshtrain/data/token_shard.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::cli {

namespace {

void print_shards(const char* split, int64_t tokens, const std::vector<std::string>& shards) {
  fmt::print("{:<5}  {:>12} tokens in {} shard(s)", split, tokens, shards.size());
  if (!shards.empty()) fmt::print(": {}{}", shards.front(), shards.size() > 1 ? " ..." : "");
  fmt::print("\n");
}

void run_prepare(const data::PrepareOptions& o, bool verbose) {
  if (o.val_fraction < 0.0 || o.val_fraction >= 1.0)
    throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", o.val_fraction));
  if (o.shard_tokens < 1 || o.shard_tokens > data::kMaxShardTokens)
    throw UsageError(fmt::format("--shard-tokens must be in [1, {}], got {}",
                                 data::kMaxShardTokens, o.shard_tokens));
  if (o.chunk_bytes < 1)
    throw UsageError(fmt::format("--chunk-bytes must be >= 1, got {}", o.chunk_bytes));
  if (o.threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", o.threads));
  const data::PrepareResult r = data::prepare_text(o);
  fmt::print("tokenizer {}\n", r.tokenizer);
  fmt::print("read   {} text file(s), {} bytes", r.files_read, r.bytes_read);
  if (!r.skipped.empty()) fmt::print("; skipped {} (binary or duplicate links)", r.skipped.size());
  fmt::print("\n");
  if (verbose)
    for (const std::string& s : r.skipped) fmt::print("  skipped {}\n", s);
  fmt::print("chunks {} of ~{} bytes, {} for validation (seed {})\n", r.chunks, o.chunk_bytes,
             r.val_chunks, o.seed);
  print_shards("train", r.train_tokens, r.train_shards);
  print_shards("val", r.val_tokens, r.val_shards);
  const double secs = std::max(r.encode_seconds, 1e-9);
  fmt::print("encoded {:.2f} MB in {:.2f} s: {:.1f} MB/s, {:.0f} tokens/s, {:.2f} bytes/token; "
             "{}-byte tokens in the shards\n", r.bytes_read / 1e6, r.encode_seconds,
             r.bytes_read / 1e6 / secs, (r.train_tokens + r.val_tokens) / secs,
             static_cast<double>(r.bytes_read) / std::max<int64_t>(1, r.train_tokens + r.val_tokens),
             r.token_bytes);
  if (o.val_fraction > 0 && r.val_tokens == 0)
    fmt::print("warning: the input is a single chunk, so the validation split is empty; "
               "lower --chunk-bytes or add text\n");
}

void run_instruct(const data::InstructOptions& o) {
  if (o.seq_len < 2)
    throw UsageError(fmt::format("--seq-len must be the training window (model.seq_len), >= 2; "
                                 "got {}", o.seq_len));
  if (o.val_fraction < 0.0 || o.val_fraction >= 1.0)
    throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", o.val_fraction));
  if (o.threads < 0) throw UsageError(fmt::format("--threads must be >= 0, got {}", o.threads));
  const data::InstructResult r = data::prepare_instruct(o);
  fmt::print("tokenizer {}, template {}\n", r.tokenizer, r.chat_template);
  if (!r.template_source.empty())
    fmt::print("template auto: the chat_template of {} is recognized as the built-in {} (by its "
               "signature; the Jinja is not run, so text it adds beyond that format, such as a "
               "default system message, is not added)\n",
               r.template_source, r.chat_template);
  fmt::print("examples {} ({} train, {} validation, seed {}); {} longer than seq_len {} were cut, "
             "{} dropped with nothing trained left\n", r.examples, r.train_examples,
             r.val_examples, o.seed, r.truncated, o.seq_len, r.dropped);
  print_shards("train", r.train_examples * o.seq_len, r.train_shards);
  print_shards("val", r.val_examples * o.seq_len, r.val_shards);
  fmt::print("tokens {} in the examples, {} of them trained on (the responses); one example per "
             "window: {} window tokens\n", r.tokens, r.trained_tokens, r.padded_tokens);
}

void run_synth(const data::SynthOptions& o) {
  if (o.tokens < 1) throw UsageError(fmt::format("--tokens must be >= 1, got {}", o.tokens));
  if (o.shard_tokens < 1 || o.shard_tokens > data::kMaxShardTokens)
    throw UsageError(fmt::format("--shard-tokens must be in [1, {}], got {}",
                                 data::kMaxShardTokens, o.shard_tokens));
  const data::SynthResult r = data::write_synth_dataset(o);
  fmt::print("grammar {} states (grammar seed {}), text seed {}\n", r.num_states, o.grammar_seed,
             o.seed);
  print_shards("train", r.train_tokens, r.train_shards);
  print_shards("val", r.val_tokens, r.val_shards);
  fmt::print("entropy rate {:.6f} nats/token = {:.6f} bits/token (exact; the best achievable "
             "loss), written to {}\n", r.entropy_nats, r.entropy_bits, r.entropy_json_path);
}

void run_inspect(const std::vector<std::string>& paths, int64_t show,
                 const std::string& tokenizer_spec) {
  const data::ByteTokenizer tokenizer;
  const std::unique_ptr<data::Tokenizer> bpe =
      tokenizer_spec.empty() ? nullptr : data::load_tokenizer(tokenizer_spec);
  for (const std::string& path : paths) {
    const data::TokenShard shard(path);
    if (shard.masked()) {
      std::vector<uint8_t> mask(static_cast<size_t>(shard.num_tokens()));
      shard.read_mask(0, shard.num_tokens(), mask.data());
      const int64_t trained = std::count(mask.begin(), mask.end(), uint8_t{1});
      fmt::print("{}: masked instruction shard, {} tokens of {} bytes in windows of {} ({} "
                 "examples), {} trained on\n", path, shard.num_tokens(), shard.token_bytes(),
                 shard.window(), shard.num_tokens() / shard.window(), trained);
    } else {
      fmt::print("{}: llm.c token shard version {}, {} tokens of {} bytes\n", path,
                 shard.version(), shard.num_tokens(), shard.token_bytes());
    }
    const int64_t n = std::min(show, shard.num_tokens());
    if (n <= 0) continue;
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    shard.read(0, n, tokens.data());
    bool bytes = !bpe;
    for (int32_t t : tokens) bytes = bytes && t < data::ByteTokenizer::kVocabSize;
    if (bpe) {
      fmt::print("first {} tokens as text ({}):\n{}\n", n, bpe->describe(), bpe->decode(tokens));
    } else if (bytes) {
      std::string text;
      for (int32_t t : tokens) text += t == '\n' ? std::string("\n") : tokenizer.token_repr(t);
      fmt::print("first {} tokens as bytes:\n{}\n", n, text);
    } else {
      fmt::print("first {} tokens: {}\n", n, fmt::join(tokens, " "));
    }
  }
}

}  // namespace

void register_data(CLI::App& app) {
  CLI::App* data_cmd = app.add_subcommand("data", "Make and inspect token shards and image shards");
  data_cmd->require_subcommand(1);

  auto prepare_opts = std::make_shared<data::PrepareOptions>();
  auto verbose = std::make_shared<bool>(false);
  CLI::App* prepare = data_cmd->add_subcommand(
      "prepare", "Text files or folders -> token shards DIR/train_*.bin and DIR/val_*.bin");
  prepare->add_option("--input", prepare_opts->inputs,
                      "Text file or folder (walked recursively; binary files skipped)")
      ->required()->expected(1, -1);
  prepare->add_option("--out", prepare_opts->out_dir, "Output folder")->required();
  prepare->add_option("--val-fraction", prepare_opts->val_fraction,
                      "Share of text chunks held out for validation")->capture_default_str();
  prepare->add_option("--shard-tokens", prepare_opts->shard_tokens, "Tokens per shard at most")
      ->capture_default_str();
  prepare->add_option("--seed", prepare_opts->seed, "Seed of the train/val split")
      ->capture_default_str();
  prepare->add_option("--chunk-bytes", prepare_opts->chunk_bytes,
                      "Split unit: chunks of about this many bytes, cut at line ends")
      ->capture_default_str();
  prepare->add_option("--tokenizer", prepare_opts->tokenizer,
                      "'bytes', or a Hugging Face tokenizer.json (or its folder): byte-level BPE "
                      "as GPT-2, Llama 3 and Qwen use, or SentencePiece-style BPE as Llama 2 and Mistral")->capture_default_str();
  prepare->add_option("--doc-separator", prepare_opts->doc_separator,
                      "A token put before each file's text, e.g. \"<|endoftext|>\"");
  prepare->add_option("--threads", prepare_opts->threads, "Encoding threads (0 = all cores)")
      ->capture_default_str();
  prepare->add_flag("-v,--verbose", *verbose, "List the skipped files");
  prepare->callback([prepare_opts, verbose] { run_prepare(*prepare_opts, *verbose); });

  auto instruct_opts = std::make_shared<data::InstructOptions>();
  CLI::App* instruct = data_cmd->add_subcommand(
      "instruct", "Instruction data (JSONL prompt/response or chat messages) -> masked shards "
                  "DIR/train_*.bin, DIR/val_*.bin: only the responses are trained on");
  instruct->add_option("--input", instruct_opts->inputs, "JSONL file(s), one example per line")
      ->required()->expected(1, -1);
  instruct->add_option("--out", instruct_opts->out_dir, "Output folder")->required();
  instruct->add_option("--seq-len", instruct_opts->seq_len,
                       "The training window (model.seq_len): one example per window, padded")
      ->required();
  instruct->add_option("--tokenizer", instruct_opts->tokenizer,
                       "'bytes', or a Hugging Face tokenizer.json (or its folder)")
      ->capture_default_str();
  instruct->add_option("--template", instruct_opts->chat_template,
                       "plain | chatml | llama2 | llama3 | mistral, or auto: the built-in that the "
                       "chat_template of the tokenizer_config.json beside --tokenizer renders "
                       "(recognized by signature, the Jinja is not run; docs/FINE_TUNING.md shows "
                       "each)")
      ->capture_default_str();
  instruct->add_option("--eos", instruct_opts->eos,
                       "plain template: a token after each response, trained on (e.g. \"<|endoftext|>\")");
  instruct->add_option("--val-fraction", instruct_opts->val_fraction,
                       "Share of examples held out for validation")->capture_default_str();
  instruct->add_option("--seed", instruct_opts->seed, "Seed of the train/val split")
      ->capture_default_str();
  instruct->add_option("--shard-examples", instruct_opts->shard_examples,
                       "Examples per shard at most")->capture_default_str();
  instruct->add_option("--threads", instruct_opts->threads, "Encoding threads (0 = all cores)")
      ->capture_default_str();
  instruct->callback([instruct_opts] { run_instruct(*instruct_opts); });

  auto synth_opts = std::make_shared<data::SynthOptions>();
  CLI::App* synth = data_cmd->add_subcommand(
      "synth", "Shards of synthetic word-like text with an exactly known entropy rate");
  synth->add_option("--out", synth_opts->out_dir, "Output folder")->required();
  synth->add_option("--tokens", synth_opts->tokens, "Training tokens")->required();
  synth->add_option("--val-tokens", synth_opts->val_tokens,
                    "Validation tokens (default: tokens / 20)");
  synth->add_option("--seed", synth_opts->seed, "Seed of the sampled text")->capture_default_str();
  synth->add_option("--grammar-seed", synth_opts->grammar_seed,
                    "Seed of the grammar (its probabilities, hence its entropy)")
      ->capture_default_str();
  synth->add_option("--shard-tokens", synth_opts->shard_tokens, "Tokens per shard at most")
      ->capture_default_str();
  synth->callback([synth_opts] { run_synth(*synth_opts); });

  auto inspect_paths = std::make_shared<std::vector<std::string>>();
  auto show = std::make_shared<int64_t>(200);
  CLI::App* inspect = data_cmd->add_subcommand("inspect", "Validate shards and show their start");
  inspect->add_option("shards", *inspect_paths, "Shard files")->required()->expected(1, -1);
  inspect->add_option("--show", *show, "Tokens to print from each shard")->capture_default_str();
  auto inspect_tokenizer = std::make_shared<std::string>();
  inspect->add_option("--tokenizer", *inspect_tokenizer,
                      "Decode with this tokenizer.json (or its folder)");
  inspect->callback([inspect_paths, show, inspect_tokenizer] {
    run_inspect(*inspect_paths, *show, *inspect_tokenizer);
  });

  register_data_images(data_cmd);
}

}  // namespace meshtrain::cli
