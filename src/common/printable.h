// Text from users (job ids, specs, paths) as it may appear in one log line:
// control characters and bytes outside printable ASCII as \xNN, and at most
// `max_bytes` of the input, so that no user can forge or flood log lines.

#ifndef JOADERFS_COMMON_PRINTABLE_H_
#define JOADERFS_COMMON_PRINTABLE_H_

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace joaderfs {

inline std::string Printable(std::string_view text, size_t max_bytes = 256) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

// Whether `text` holds a control character: a byte below 0x20 (newline,
// CR and tab among them) or 0x7f. Such names are refused wherever a name
// becomes a line of text; Printable() escapes them for the log.
inline bool HasControlByte(std::string_view text) {
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_PRINTABLE_H_
