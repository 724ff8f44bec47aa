"""Sizing warnings where the admin looks (docs/design.md 2.5): what the
daemon logs at mount about its sizing, a disk tier smaller than the decoded
set or a ram_cache taken from a cgroup's limit, is also on the mount
command's stderr and in /stats "warnings". Daemonized, as users mount."""

import os
import subprocess
import unittest

from harness import JoaderTestCase


class WarningsTest(JoaderTestCase):

    def placeholders(self, n):
        """n files a scan takes for images (the sizing needs no decode)."""
        source = os.path.join(self.tempdir(), "src")
        for c in range(4):
            os.makedirs(os.path.join(source, "c%d" % c))
            for i in range(n // 4):
                with open(os.path.join(source, "c%d" % c, "%d.jpg" % i), "wb") as f:
                    f.write(b"x")
        return source

    def stderr_of(self, m):
        with open(m.stderr_path, errors="replace") as f:
            return f.read()

    def test_a_disk_tier_smaller_than_the_set(self):
        if os.geteuid() != 0:
            self.skipTest("mounts a tmpfs: needs root")
        cache = self.tempdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", cache], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", cache])
        # 2000 samples at base 256: ~560 MiB decoded, in 64 MiB.
        m = self.mount(self.placeholders(2000), {"cache_dir": cache, "disk_cache": False})
        self.assertIn("joaderfs: warning: disk tier:", self.stderr_of(m))
        warnings = m.stats()["warnings"]
        self.assertEqual(len(warnings), 1, warnings)
        self.assertIn("later epochs decode the rest", warnings[0])

    def test_ram_cache_from_a_cgroup(self):
        launcher, _ = self.memory_cgroup_launcher(400 << 20)
        m = self.mount(self.placeholders(40), {"ram_cache": False}, start=False)
        m.argv[0] = launcher
        m.start()
        self.assertIn("joaderfs: warning: ram_cache: 100 MiB", self.stderr_of(m))
        self.assertTrue(any("cgroup" in w for w in m.stats()["warnings"]))

    def test_none_when_sized_well(self):
        m = self.mount(self.placeholders(40))
        self.assertEqual(m.stats()["warnings"], [])
        self.assertNotIn("warning", self.stderr_of(m))


if __name__ == "__main__":
    unittest.main()
