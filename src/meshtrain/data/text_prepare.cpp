#include "meshtrain/data/text_prepare.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "meshtrain/data/token_shard.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

namespace fs = std::filesystem;

namespace {

// Enough of a file to tell text from binary without reading all of it.
constexpr size_t kSniffBytes = 64 * 1024;

std::string read_file(const std::string& path, size_t max_bytes = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}'", path);
  std::string out;
  if (max_bytes == SIZE_MAX) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (!ec) out.reserve(static_cast<size_t>(size));
  }
  char buf[1 << 16];
  while (out.size() < max_bytes) {
    in.read(buf, sizeof(buf));
    if (in.gcount() <= 0) break;
    out.append(buf, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail("error while reading '{}'", path);
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

}  // namespace

bool looks_like_text(std::string_view sample) {
  size_t control = 0;
  for (char ch : sample) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == 0) return false;
    const bool whitespace = c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v';
    if ((c < 0x20 && !whitespace && c != 0x1b && c != '\b') || c == 0x7f) ++control;
  }
  return control * 10 <= sample.size();
}

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs,
                                             std::vector<std::string>* skipped) {
  MT_CHECK(!inputs.empty(), "no input given: pass --input FILE_OR_FOLDER");
  std::vector<std::string> files;
  std::set<fs::path> seen;  // canonical paths, so foo.u8 -> foo is read once
  auto take = [&](const fs::path& p) {
    std::error_code ec;
    const fs::path canon = fs::canonical(p, ec);
    if (!seen.insert(ec ? p : canon).second) {
      if (skipped) skipped->push_back(p.string() + " (same file as one already read)");
      return;
    }
    files.push_back(p.string());
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (!fs::exists(st)) fail("input '{}' does not exist", input);
    if (fs::is_regular_file(st)) {
      if (!looks_like_text(read_file(input, kSniffBytes)))
        fail("input '{}' looks binary (NUL or control bytes); pass text files", input);
      take(input);
      continue;
    }
    if (!fs::is_directory(st)) fail("input '{}' is neither a file nor a folder", input);
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(input, fs::directory_options::skip_permission_denied, ec);
    if (ec) fail("cannot list folder '{}': {}", input, ec.message());
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) fail("cannot list folder '{}': {}", input, ec.message());
      if (is_hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path());
    }
    std::sort(found.begin(), found.end());
    for (const fs::path& p : found) {
      if (!looks_like_text(read_file(p.string(), kSniffBytes))) {
        if (skipped) skipped->push_back(p.string() + " (binary)");
        continue;
      }
      take(p);
    }
  }
  return files;
}

std::vector<std::string_view> split_chunks(std::string_view text, int64_t chunk_bytes,
                                           bool before_printable) {
  MT_CHECK(chunk_bytes >= 1, "chunk size must be at least 1 byte, got {}", chunk_bytes);
  std::vector<std::string_view> chunks;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t want = pos + static_cast<size_t>(chunk_bytes);
    size_t end = text.size();
    size_t from = want - 1;
    while (want < text.size()) {
      const size_t nl = text.find('\n', from);
      if (nl == std::string_view::npos) break;
      const bool ok = !before_printable ||
                      (nl + 1 < text.size() && text[nl + 1] > ' ' && text[nl + 1] < 0x7f);
      if (ok) {
        end = nl + 1;
        break;
      }
      from = nl + 1;
    }
    chunks.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return chunks;
}

std::vector<bool> choose_val_chunks(int64_t n, double fraction, uint64_t seed) {
  MT_CHECK(fraction >= 0.0 && fraction < 1.0, "validation fraction must be in [0, 1), got {}",
           fraction);
  std::vector<bool> val(static_cast<size_t>(n), false);
  int64_t k = std::llround(fraction * static_cast<double>(n));
  if (fraction > 0 && n >= 2) k = std::clamp<int64_t>(k, 1, n - 1);
  if (n < 2) k = 0;  // a single chunk always trains
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  for (int64_t i = 0; i < k; ++i) {  // partial Fisher-Yates: the first k are a uniform pick
    const int64_t j = i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i)));
    std::swap(order[i], order[j]);
    val[static_cast<size_t>(order[i])] = true;
  }
  return val;
}

PrepareResult prepare_text(const PrepareOptions& options) {
  MT_CHECK(!options.out_dir.empty(), "no output folder given: pass --out DIR");
  MT_CHECK(options.val_fraction >= 0.0 && options.val_fraction < 1.0,
           "--val-fraction must be in [0, 1), got {}", options.val_fraction);
  PrepareResult result;
  const std::vector<std::string> files = collect_input_files(options.inputs, &result.skipped);
  if (files.empty())
    fail("no text files found in the inputs ({} skipped as binary or duplicate)",
         result.skipped.size());

  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(options.tokenizer);
  const bool byte_level = options.tokenizer == "bytes" || options.tokenizer == "byte";
  result.tokenizer = tokenizer->describe();
  result.vocab_size = tokenizer->vocab_size();
  result.token_bytes = tokenizer->vocab_size() > 65536 ? 4 : 2;
  std::vector<int32_t> separator;
  if (!options.doc_separator.empty()) {
    const std::optional<int32_t> id = tokenizer->token_id(options.doc_separator);
    if (!id)
      fail("document separator '{}' is not a token of {}", options.doc_separator,
           result.tokenizer);
    separator.push_back(*id);
  }

  // Pass 1: count chunks, so the validation choice is an exact share of them.
  std::vector<int64_t> chunks_per_file;
  for (const std::string& f : files) {
    const std::string text = read_file(f);
    result.bytes_read += static_cast<int64_t>(text.size());
    chunks_per_file.push_back(
        static_cast<int64_t>(split_chunks(text, options.chunk_bytes, !byte_level).size()));
    result.chunks += chunks_per_file.back();
  }
  result.files_read = static_cast<int64_t>(files.size());
  if (result.bytes_read == 0)
    fail("the inputs hold no text: all {} file(s) are empty", files.size());
  const std::vector<bool> is_val = choose_val_chunks(result.chunks, options.val_fraction,
                                                     options.seed);

  // Pass 2: stream each chunk's tokens into its split's shard series.
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) fail("cannot create output folder '{}': {}", options.out_dir, ec.message());
  ShardSeriesWriter train(options.out_dir, "train", options.shard_tokens, result.token_bytes);
  ShardSeriesWriter val(options.out_dir, "val", options.shard_tokens, result.token_bytes);
  const int threads = options.threads > 0 ? options.threads : omp_get_num_procs();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> encoded;
  int64_t chunk_index = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string text = read_file(files[i]);
    const auto chunks = split_chunks(text, options.chunk_bytes, !byte_level);
    MT_CHECK(static_cast<int64_t>(chunks.size()) == chunks_per_file[i],
             "'{}' changed while being prepared", files[i]);
    // Encode the file's chunks in parallel, then append them in order.
    encoded.assign(chunks.size(), {});
    const auto n = static_cast<int64_t>(chunks.size());
    std::exception_ptr error;  // an exception may not leave an OpenMP region
#pragma omp parallel for num_threads(threads) schedule(dynamic, 4) if (n > 1 && threads > 1)
    for (int64_t c = 0; c < n; ++c) {
      try {
        auto& out = encoded[static_cast<size_t>(c)];
        // A file is one text: later chunks continue it (no SentencePiece "▁").
        if (c == 0) {
          out = separator;
          tokenizer->encode_into(chunks[static_cast<size_t>(c)], out);
        } else {
          tokenizer->encode_continuation_into(chunks[static_cast<size_t>(c)], out);
        }
      } catch (...) {
#pragma omp critical(prepare_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    for (const std::vector<int32_t>& tokens : encoded) {
      if (is_val[static_cast<size_t>(chunk_index++)]) {
        val.append(std::span<const int32_t>(tokens));
        ++result.val_chunks;
      } else {
        train.append(std::span<const int32_t>(tokens));
      }
    }
  }
  result.encode_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!byte_level) {  // the tokenizer travels with its shards (generation reads it there)
    fs::path src = options.tokenizer;
    if (fs::is_directory(src)) src /= "tokenizer.json";
    const fs::path dst = fs::path(options.out_dir) / "tokenizer.json";
    std::error_code copy_ec;
    if (!fs::exists(dst) || !fs::equivalent(src, dst, copy_ec))
      fs::copy_file(src, dst, fs::copy_options::overwrite_existing, copy_ec);
    if (copy_ec) fail("cannot copy the tokenizer to '{}': {}", dst.string(), copy_ec.message());
  }
  result.train_tokens = train.tokens_written();
  result.val_tokens = val.tokens_written();
  result.train_shards = train.finish();
  result.val_shards = val.finish();
  return result;
}

}  // namespace meshtrain::data
