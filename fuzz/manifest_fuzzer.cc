// Manifest files (relpath<TAB>label lines). Checks that no kept path can
// leave the manifest's folder and that labels stay in range.

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "catalog/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace joaderfs;
  Manifest m;
  if (!ParseManifest(std::string_view(reinterpret_cast<const char*>(data), size), &m).ok()) {
    return 0;
  }
  for (const ManifestEntry& e : m.entries) {
    if (e.relpath.empty() || EscapesFolder(e.relpath) || e.label < 0 || e.label > INT32_MAX) {
      std::abort();
    }
  }
  if ((m.rejected == 0) != (m.first_rejected_line == 0)) std::abort();
  return 0;
}
