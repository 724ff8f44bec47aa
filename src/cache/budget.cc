#include "cache/budget.h"

#include <string>

namespace joaderfs {

Status CheckSizeFitsBudget(uint32_t size, uint64_t budget) {
  const uint64_t bytes = SquareSampleBytes(size);
  if (bytes <= PlanOverdraft(budget)) return Status::Ok();
  return Status::InvalidArgument("size=" + std::to_string(size) + ": a sample takes " +
                                 std::to_string(bytes >> 10) +
                                 " KiB, more than a quarter of ram_cache");
}

}  // namespace joaderfs
