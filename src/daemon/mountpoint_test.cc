#include "daemon/mountpoint.h"

#include <gtest/gtest.h>

namespace joaderfs {
namespace {

TEST(MountpointTest, TheTopMountAtAPathNamesItsType) {
  const std::string info =
      "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
      "40 22 0:35 / /mnt/data rw,nosuid,nodev shared:1 - fuse.joaderfs /src rw,user_id=0\n"
      "41 1 0:36 / /mnt/with\\040space rw - fuse.joaderfs /src rw\n"
      "42 1 0:37 / /mnt/other rw - ext4 /dev/sda1 rw\n"
      "43 1 0:38 / /mnt/other rw - fuse.joaderfs /src rw\n";
  EXPECT_EQ(MountedType(info, "/mnt/data"), "fuse.joaderfs");
  EXPECT_EQ(MountedType(info, "/mnt/with space"), "fuse.joaderfs");
  EXPECT_EQ(MountedType(info, "/mnt/other"), "fuse.joaderfs") << "the last mount is on top";
  EXPECT_EQ(MountedType(info, "/mnt"), "");
  EXPECT_EQ(MountedType(info, "/mnt/dat"), "");
}

}  // namespace
}  // namespace joaderfs
