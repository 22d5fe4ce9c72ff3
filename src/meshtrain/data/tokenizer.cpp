#include "meshtrain/data/tokenizer.h"

#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/data/bpe_tokenizer.h"
#include "meshtrain/data/byte_tokenizer.h"
#include "meshtrain/data/utf8.h"

namespace meshtrain::data {

namespace fs = std::filesystem;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens) out = prefix_tokens();
  encode_into(text, out);
  if (add_special_tokens) {
    const std::vector<int32_t> suffix = suffix_tokens();
    out.insert(out.end(), suffix.begin(), suffix.end());
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return utf8_lossy(decode_bytes(ids, skip_special));
}

namespace {
// The byte-level tokenizer behind the seam.
class BytesTokenizer final : public Tokenizer {
 public:
  int vocab_size() const override { return ByteTokenizer::kVocabSize; }
  std::string describe() const override { return "byte-level (256 tokens, one per byte)"; }
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override {
    out.reserve(out.size() + text.size());
    for (char c : text) out.push_back(static_cast<uint8_t>(c));
  }
  std::string decode_bytes(std::span<const int32_t> ids, bool) const override {
    return ByteTokenizer().decode(ids);
  }
  std::optional<int32_t> token_id(std::string_view token) const override {
    if (token.size() == 1) return static_cast<uint8_t>(token[0]);
    return std::nullopt;
  }
};
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes" || spec == "byte") return std::make_unique<BytesTokenizer>();
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    const fs::path file = fs::path(spec) / "tokenizer.json";
    if (!fs::exists(file, ec))
      fail("folder '{}' holds no tokenizer.json (a Hugging Face tokenizer), and only that "
           "format is read; pass the file itself or 'bytes'", spec);
    return BpeTokenizer::from_file(file.string());
  }
  if (!fs::exists(spec, ec))
    fail("tokenizer '{}' does not exist (give a tokenizer.json, a folder holding one, or "
         "'bytes')", spec);
  return BpeTokenizer::from_file(spec);
}

}  // namespace meshtrain::data
