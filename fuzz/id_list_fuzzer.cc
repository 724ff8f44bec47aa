// The ids file of a job (/jobs/<id>/ids): sample ids or relative paths, one
// a line. Checks that only ids of the catalog come out.

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_catalog.h"
#include "spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace joaderfs;
  const Catalog& catalog = FuzzCatalog();
  Roaring ids;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (ParseIdList(text, catalog, &ids).ok() && !ids.isEmpty() && ids.maximum() >= catalog.size()) {
    std::abort();
  }
  return 0;
}
