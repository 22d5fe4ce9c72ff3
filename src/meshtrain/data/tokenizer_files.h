// The files a Hugging Face checkpoint ships its tokenizer in, copied beside an
// exported model so `transformers` (and `meshtrain generate`) find them.
#pragma once
#include <string>
#include <vector>

namespace meshtrain::data {

// tokenizer.json at `source` (the file, or a folder holding it), checked to
// load (load_tokenizer); throws meshtrain::Error naming what is missing.
std::string checked_tokenizer_json(const std::string& source);

// Copies tokenizer.json from `source` (the file, or a folder holding it) into
// `out_dir`, with tokenizer_config.json, special_tokens_map.json and
// generation_config.json when they sit beside it. Checks that tokenizer.json
// loads first (load_tokenizer). Returns the paths written; throws
// meshtrain::Error naming what is missing or unreadable.
std::vector<std::string> copy_tokenizer_files(const std::string& source, const std::string& out_dir);

}  // namespace meshtrain::data
