// Errors are values with context: library code throws, only main() decides the exit status.
// A ConfigError is the user's to fix (it names the setting and the fix); an Error is anything else
// that went wrong (a corrupt file, a failed system call), with the place it was detected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace scalelab {

// Bad input from the user: an invalid setting, a missing or mismatched file.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Everything else: an internal failure or a failed call into a library or the OS.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

// require(cond, "setting", "what is wrong", "the fix") throws a ConfigError whose message
// reads: `<setting>: <what is wrong>; <the fix>`.
inline void require(bool condition, const std::string& setting, const std::string& problem, const std::string& fix) {
  if (!condition) throw ConfigError(setting + ": " + problem + "; " + fix);
}

}  // namespace scalelab

// SCALELAB_CHECK(cond, parts...) throws scalelab::Error with file:line for internal invariants.
#define SCALELAB_CHECK(cond, ...)                                                                                \
  do {                                                                                                           \
    if (!(cond))                                                                                                 \
      throw ::scalelab::Error(                                                                                   \
          ::scalelab::detail::concat(__FILE__, ":", __LINE__, ": ", "check failed (" #cond "): ", __VA_ARGS__)); \
  } while (0)
