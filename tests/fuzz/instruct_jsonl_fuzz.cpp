// Fuzz target: instruction data as `meshtrain data instruct` reads it (JSONL:
// prompt/response pairs or chat messages), each line rendered under every
// built-in chat template and encoded with the byte tokenizer.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/chat_template.h"
#include "meshtrain/data/instruct_prepare.h"
#include "meshtrain/data/tokenizer.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizer = data::load_tokenizer("bytes");
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bool any = false;
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string line(text.substr(begin, end - begin));
    begin = end + 1;
    ++line_no;
    for (const std::string& tmpl : data::builtin_chat_templates()) {
      try {
        const data::EncodedExample ex =
            data::encode_example(line, *tokenizer, tmpl, "", "input:" + std::to_string(line_no));
        if (ex.tokens.size() != ex.mask.size()) std::abort();  // one mask byte per token
        any = true;
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    }
  }
  if (any) fuzz::note_accepted();
  return 0;
}
