// The one error type of meshtrain: a message that says what is wrong and where.
#pragma once
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <fmt/format.h>

namespace meshtrain {

// Thrown for bad input and failed invariants. The CLI catches it, prints
// "error: <what>" and exits with status 1 (2 for usage errors).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Usage errors (wrong flag, wrong value on the command line): exit status 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// The message of the last failed system call (errno), for an Error's text.
inline std::string errno_str() { return std::strerror(errno); }

}  // namespace meshtrain

// MT_CHECK(cond, "format {}", args...): throw meshtrain::Error when cond is false.
#define MT_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) ::meshtrain::fail(__VA_ARGS__); \
  } while (0)
