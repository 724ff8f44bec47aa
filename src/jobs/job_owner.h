// The owner rule: a job's files that change or consume it are its owner's,
// and root's. The one place that says so (fs/ and jobs/ ask here).
// Pure functions: thread-safe.

#ifndef JOADERFS_JOBS_JOB_OWNER_H_
#define JOADERFS_JOBS_JOB_OWNER_H_

#include <cstdint>
#include <string>

#include "common/status.h"

namespace joaderfs {

inline bool MayUseJob(uint32_t uid, uint32_t owner) { return uid == 0 || uid == owner; }

// Permission naming the job unless MayUseJob().
inline Status CheckJobOwner(const std::string& job, uint32_t owner, uint32_t uid) {
  if (MayUseJob(uid, owner)) return Status::Ok();
  return Status::Permission("job " + job + " is not yours");
}

}  // namespace joaderfs

#endif  // JOADERFS_JOBS_JOB_OWNER_H_
