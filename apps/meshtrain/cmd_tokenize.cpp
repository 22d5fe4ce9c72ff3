// `meshtrain tokenize`: a quick look at a tokenizer, text -> ids -> text.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/tokenizer.h"
#include "meshtrain/data/utf8.h"

namespace meshtrain::cli {

namespace {
struct TokenizeArgs {
  std::string tokenizer = "bytes";
  std::vector<std::string> text;
  std::string file;
  std::vector<int32_t> ids;
  bool special = false;
  bool quiet = false;
};

// One token's bytes as a printable, quoted piece: whole UTF-8 characters as
// they are, bytes of a character cut between tokens as \xNN.
std::string show_piece(const std::string& bytes) {
  std::string out = "'";
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const int n = c >= 0x80 ? data::utf8_sequence(bytes, i, nullptr) : 1;
    if (c >= 0x80 && n > 0) {
      out.append(bytes, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n) - 1;
    } else if (c >= 0x80) out += fmt::format("\\x{:02x}", c);
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '\'') out += "\\'";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out.push_back(static_cast<char>(c));
  }
  return out + "'";
}

void run_tokenize(const TokenizeArgs& a) {
  const auto tok = data::load_tokenizer(a.tokenizer);
  fmt::print("tokenizer: {}\n", tok->describe());
  if (!a.ids.empty()) {
    fmt::print("{}\n", tok->decode(a.ids));
    return;
  }
  std::string text;
  if (!a.file.empty()) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("cannot read --file '{}'", a.file));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    for (size_t i = 0; i < a.text.size(); ++i) text += (i ? " " : "") + a.text[i];
  }
  if (text.empty() && a.file.empty())
    throw UsageError("give text to encode (words, or --file F) or --ids to decode");
  const std::vector<int32_t> ids = tok->encode(text, a.special);
  fmt::print("{} bytes -> {} tokens ({:.2f} bytes/token)\n", text.size(), ids.size(),
             ids.empty() ? 0.0 : static_cast<double>(text.size()) / ids.size());
  fmt::print("ids: {}\n", fmt::join(ids, " "));
  if (!a.quiet) {
    std::string pieces;
    for (int32_t id : ids) {
      // A piece as it reads inside text (SentencePiece's "▁" as the space).
      const int32_t one[1] = {id};
      pieces += (pieces.empty() ? "" : " ") +
                show_piece(tok->is_special(id) ? tok->decode_bytes(one) : tok->continuation_bytes(id));
    }
    fmt::print("pieces: {}\n", pieces);
  }
  const bool round_trip = tok->decode_bytes(ids, a.special) == text;
  fmt::print("decode(encode(text)) == text: {}\n", round_trip ? "yes" : "no");
}
}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* c = app.add_subcommand("tokenize", "Encode text to token ids, or decode ids to text");
  c->add_option("--tokenizer", a->tokenizer,
                "'bytes', or a Hugging Face tokenizer.json (or the folder holding it)")
      ->capture_default_str();
  c->add_option("text", a->text, "Text to encode (words are joined by spaces)");
  c->add_option("--file", a->file, "Encode this file's bytes instead");
  c->add_option("--ids", a->ids, "Token ids to decode")->delimiter(',');
  c->add_flag("--special", a->special,
              "Add the tokenizer's special tokens around the text (e.g. Llama 3's "
              "<|begin_of_text|>)");
  c->add_flag("-q,--quiet", a->quiet, "Ids only, no pieces");
  c->callback([a] { run_tokenize(*a); });
}

}  // namespace meshtrain::cli
