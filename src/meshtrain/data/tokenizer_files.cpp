#include "meshtrain/data/tokenizer_files.h"

#include <filesystem>

#include "meshtrain/core/error.h"
#include "meshtrain/data/tokenizer.h"

namespace meshtrain::data {

namespace fs = std::filesystem;

std::string checked_tokenizer_json(const std::string& source) {
  fs::path json(source);
  std::error_code ec;
  if (fs::is_directory(json, ec)) json /= "tokenizer.json";
  MT_CHECK(fs::is_regular_file(json, ec), "no tokenizer.json at '{}' (give the file or its folder)",
           source);
  load_tokenizer(json.string());  // refuse a file the tokenizer cannot read
  return json.string();
}

std::vector<std::string> copy_tokenizer_files(const std::string& source, const std::string& out_dir) {
  const fs::path json = checked_tokenizer_json(source);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  MT_CHECK(!ec, "cannot create '{}': {}", out_dir, ec.message());
  std::vector<std::string> written;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"}) {
    const fs::path src = json.parent_path() / name;
    if (!fs::is_regular_file(src, ec)) continue;
    const fs::path dst = fs::path(out_dir) / name;
    if (fs::exists(dst, ec) && fs::equivalent(src, dst, ec)) continue;  // already there
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    MT_CHECK(!ec, "cannot copy '{}' to '{}': {}", src.string(), dst.string(), ec.message());
    written.push_back(dst.string());
  }
  return written;
}

}  // namespace meshtrain::data
