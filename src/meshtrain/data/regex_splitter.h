// Splits text with a pre-tokenization pattern (tokenizer.json's `Split` and
// `ByteLevel` regexes), keeping both the matches and the text between them as
// pieces ("Isolated" behaviour), so the pieces cover the text exactly.
//
// The engine is PCRE2 (Debian's libpcre2), compiled once and JIT-compiled:
// it speaks the Unicode property classes (\p{L}, \p{N}), case-insensitive
// groups and the negative lookahead the GPT-2, Llama 3 and Qwen patterns use,
// and with PCRE2_MATCH_INVALID_UTF it matches text holding invalid UTF-8 (such
// bytes never match and end up in the gaps) instead of refusing it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace meshtrain::data {

class RegexSplitter {
 public:
  // Throws meshtrain::Error naming the pattern and the offset PCRE2 reports.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  const std::string& pattern() const { return pattern_; }
  // Appends the pieces of `text`, in order, to `out` (views into `text`).
  // Safe to call from several threads at once.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

// GPT-2's pattern, which ByteLevel(use_regex=true) applies.
extern const char* const kGpt2SplitPattern;

}  // namespace meshtrain::data
