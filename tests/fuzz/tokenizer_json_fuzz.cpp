// Fuzz target: a Hugging Face tokenizer.json, loaded as `data prepare
// --tokenizer FILE` loads it, then used: text with special tokens, spaces,
// digits and multi-byte characters encoded and decoded, and the first ids
// decoded one by one.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/tokenizer.h"

using namespace meshtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_input(data, size, "tokenizer.json");
  try {
    const auto tok = data::load_tokenizer(path);
    const std::string text = "Hello, world! <|endoftext|>  x\n\tcaf\xc3\xa9 12345 \xe2\x96\x81s \xf0\x9f\x99\x82";
    const std::vector<int32_t> ids = tok->encode(text, /*add_special_tokens=*/true);
    (void)tok->decode(ids);
    (void)tok->decode_bytes(ids, /*skip_special=*/true);
    std::vector<int32_t> more;
    tok->encode_continuation_into(" again", more);
    const int first = std::min(tok->vocab_size(), 300);
    for (int32_t id = 0; id < first; ++id) {
      (void)tok->continuation_bytes(id);
      (void)tok->is_special(id);
    }
    (void)tok->token_id("<|endoftext|>");
    (void)tok->describe();
    fuzz::note_accepted();
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
