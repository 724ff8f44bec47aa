// Plain-text layout of option and key lists (the daemon's --help, the
// mount's /README). Pure functions; thread-safe.

#ifndef JOADERFS_COMMON_WRAP_H_
#define JOADERFS_COMMON_WRAP_H_

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace joaderfs {

// `lead`, padded to `column` (followed by two spaces when it is a little
// longer, by a new line when much longer), then `text` wrapped at `width`
// columns with continuation lines indented to `column`. Ends with a
// newline.
inline std::string HangingParagraph(std::string_view lead, std::string_view text, size_t column,
                                    size_t width) {
  std::string out(lead);
  size_t line_start = 0;
  if (out.size() + 2 <= column) {
    out.resize(column, ' ');
  } else if (out.size() + 2 <= column + 8) {
    out += "  ";
  } else {
    out += '\n' + std::string(column, ' ');
    line_start = out.size() - column;
  }
  bool first_word = true;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(' ', at), text.size());
    const std::string_view word = text.substr(at, end - at);
    at = end + 1;
    if (word.empty()) continue;
    if (!first_word && out.size() - line_start + 1 + word.size() > width) {
      out += '\n' + std::string(column, ' ');
      line_start = out.size() - column;
    } else if (!first_word) {
      out += ' ';
    }
    out += word;
    first_word = false;
  }
  return out + '\n';
}

}  // namespace joaderfs

#endif  // JOADERFS_COMMON_WRAP_H_
