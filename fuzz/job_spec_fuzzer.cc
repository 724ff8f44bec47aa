// Job specs as users write them to /jobs/<id>/spec (docs/design.md 2.3). Besides
// crashes and UB, checks that a parsed spec stays within its bounds and that
// what the spec file shows parses back to the same spec.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/fuzz_catalog.h"
#include "spec/spec.h"

namespace joaderfs {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace
}  // namespace joaderfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace joaderfs;
  const Catalog& catalog = FuzzCatalog();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  JobSpec spec;
  if (!ParseJobSpec(text, catalog, JobSpec(), &spec).ok()) return 0;
  Check(spec.size <= kMaxSize && spec.window >= 1 && spec.window <= kMaxWindow);
  const Roaring ids = ResolveSubset(spec.subset, catalog);
  Check(!ids.isEmpty() && ids.maximum() < catalog.size());
  JobSpec again;
  Check(ParseJobSpec(spec.ToString(), catalog, JobSpec(), &again).ok());
  Check(again.ToString() == spec.ToString());
  Check(ResolveSubset(again.subset, catalog) == ids);
  return 0;
}
