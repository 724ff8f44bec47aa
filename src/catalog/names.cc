#include "catalog/names.h"

#include <algorithm>
#include <cctype>

namespace joaderfs {

bool IsImageName(const std::string& name) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext : kExtensions) {
    if (lower.ends_with(ext)) return true;
  }
  return false;
}

bool IsTarName(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".tar") == 0;
}

bool PathLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const size_t ie = std::min(a.find('/', i), a.size());
    const size_t je = std::min(b.find('/', j), b.size());
    const int c = a.compare(i, ie - i, b, j, je - j);
    if (c != 0) return c < 0;
    i = ie + 1;
    j = je + 1;
  }
  return a.size() - std::min(i, a.size()) < b.size() - std::min(j, b.size());
}

}  // namespace joaderfs
