#include "catalog/manifest.h"

#include "common/types.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "common/parse.h"
#include "common/printable.h"

namespace joaderfs {

bool EscapesFolder(std::string_view relpath) {
  if (relpath.starts_with('/') || relpath.find('\0') != std::string_view::npos) return true;
  int64_t depth = 0;
  size_t start = 0;
  while (start <= relpath.size()) {
    const size_t slash = std::min(relpath.find('/', start), relpath.size());
    const std::string_view part = relpath.substr(start, slash - start);
    if (part == "..") {
      if (--depth < 0) return true;
    } else if (!part.empty() && part != ".") {
      ++depth;
    }
    start = slash + 1;
  }
  return false;
}

Status ParseManifest(std::string_view text, Manifest* out) {
  *out = {};
  size_t lineno = 0;
  while (!text.empty()) {
    ++lineno;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t tab = line.rfind('\t');
    const auto label =
        tab == std::string_view::npos ? std::nullopt : ParseUint(line.substr(tab + 1));
    if (!label || tab == 0) {
      return Status::InvalidArgument("line " + std::to_string(lineno) +
                                     ": expected relpath<TAB>label");
    }
    if (*label > static_cast<uint64_t>(kMaxLabel)) {
      return Status::InvalidArgument("line " + std::to_string(lineno) + ": label " +
                                     std::to_string(*label) + " is past " +
                                     std::to_string(kMaxLabel));
    }
    const std::string_view relpath = line.substr(0, tab);
    if (EscapesFolder(relpath)) {
      if (out->rejected++ == 0) out->first_rejected_line = lineno;
      continue;
    }
    if (HasControlByte(relpath)) {
      if (out->unprintable++ == 0) out->first_unprintable_line = lineno;
      continue;
    }
    out->entries.push_back({std::string(relpath), static_cast<int64_t>(*label)});
  }
  return Status::Ok();
}

}  // namespace joaderfs
