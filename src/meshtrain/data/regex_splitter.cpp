#include "meshtrain/data/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {
std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread matching state: match data for the whole match only (the same
// for every pattern) and a JIT stack large enough for long whitespace runs
// under `\s+(?!\S)`, which backtracks.
struct ThreadMatcher {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;

  ThreadMatcher() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (!data || !context || !stack) fail("out of memory for the tokenizer's regex matcher");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatcher() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  ThreadMatcher(const ThreadMatcher&) = delete;
  ThreadMatcher& operator=(const ThreadMatcher&) = delete;
};
}  // namespace

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

RegexSplitter::RegexSplitter(const std::string& pattern)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset,
                              nullptr);
  if (!code_->code)
    fail("tokenizer split pattern '{}' does not compile at offset {}: {}", pattern, offset,
         pcre2_message(err));
  // Without a JIT (some platforms) the interpreter gives the same matches.
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local ThreadMatcher matcher;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap_start = 0;
  while (pos < text.size()) {
    const int rc = code_->jit
                       ? pcre2_jit_match(code_->code, subject, text.size(), pos, 0, matcher.data,
                                         matcher.context)
                       : pcre2_match(code_->code, subject, text.size(), pos, 0, matcher.data,
                                     matcher.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      fail("tokenizer split pattern failed at byte {} of a {}-byte text: {}", pos, text.size(),
           pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(matcher.data);
    const size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step over one byte (it joins the gap)
      pos = begin + 1;
      continue;
    }
    if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
    out.push_back(text.substr(begin, end - begin));
    pos = gap_start = end;
  }
  if (gap_start < text.size()) out.push_back(text.substr(gap_start));
}

}  // namespace meshtrain::data
