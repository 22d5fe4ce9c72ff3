// `meshtrain data prepare`: text files -> train/val token shards, with the
// byte-level tokenizer or a Hugging Face tokenizer.json (data/tokenizer.h).
//
// Each file is cut into chunks of about `chunk_bytes` at line ends (a file
// boundary always ends a chunk); a seeded choice of whole chunks becomes the
// validation split, so no validation text appears inside the training text.
// Chunks keep their input order within each split. Deterministic for a given
// input list, options and seed, whatever the thread count.
//
// With a BPE tokenizer, chunks are encoded in parallel, and a chunk ends only
// at a line end followed by a printable ASCII byte: no pre-tokenization
// pattern in use (GPT-2's, Llama 3's) joins across such a point, so the shards
// hold exactly the ids that encoding each whole file would give.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and/or folders (walked recursively)
  std::string out_dir;
  double val_fraction = 0.05;       // share of chunks for validation, in [0, 1)
  int64_t shard_tokens = 100'000'000;  // llm.c's shard size
  uint64_t seed = 1;
  int64_t chunk_bytes = 4096;
  std::string tokenizer = "bytes";  // "bytes", a tokenizer.json, or a folder holding one
  std::string doc_separator;        // a token ("<|endoftext|>") put before each file's text
  int threads = 0;                  // encoding threads; 0 = all cores
};

struct PrepareResult {
  int64_t files_read = 0;
  int64_t bytes_read = 0;
  int64_t chunks = 0;
  int64_t val_chunks = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> skipped;  // "PATH (reason)" for files left out of folders
  std::vector<std::string> train_shards;  // DIR/train_000000.bin ...
  std::vector<std::string> val_shards;    // DIR/val_000000.bin ...
  std::string tokenizer;                  // what encoded the text (Tokenizer::describe)
  int vocab_size = 0;
  int token_bytes = 2;                    // shard width: 4 for vocabularies over 65536
  double encode_seconds = 0;              // wall time spent reading and encoding
};

// Throws meshtrain::Error for a missing input, an unreadable or binary file
// named explicitly, or inputs that hold no text at all.
PrepareResult prepare_text(const PrepareOptions& options);

// The pieces, public for tests and for other front ends.

// Files named directly are taken as they are; folders are walked recursively
// in sorted order, skipping hidden entries, binary files (appended to
// `skipped`) and second links to a file already taken.
std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs,
                                             std::vector<std::string>* skipped);
// Text means: no NUL byte and at most 10% other control bytes in the sample.
bool looks_like_text(std::string_view sample);
// Consecutive chunks covering `text` exactly, each ending at a line end once
// it reaches `chunk_bytes` (or at the end of the text). With
// `before_printable`, only at a line end followed by a printable ASCII byte.
std::vector<std::string_view> split_chunks(std::string_view text, int64_t chunk_bytes,
                                           bool before_printable = false);
// Which of `n` chunks go to validation: round(fraction * n) of them, chosen by
// a seeded shuffle; at least one when fraction > 0 and n >= 2, never all.
std::vector<bool> choose_val_chunks(int64_t n, double fraction, uint64_t seed);

}  // namespace meshtrain::data
