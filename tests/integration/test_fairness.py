"""One user's work neither slows nor fattens the others (docs/design.md 3.1
"Limits"), each case run by uid 65534 through `setpriv` on root's
daemonized mount with allow_other:

- TFRecord framing reads every pixel for its checksum; it runs outside the
  job manager's lock, so root's control-file reads wait no longer while
  uid 65534 has records of 192 MB framed as TFRecords than as JSF1 records.

Run: JOADERFS_BIN=build/joaderfs python3 -m unittest -v test_fairness
(from tests/integration)."""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np
from PIL import Image

from harness import JoaderTestCase, require_binary

# 144 Mpx: a 432 MB record, whose TFRecord checksum takes tens of ms.
BIG_SIDE = 12000
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# uid 65534's reader: makes job argv[2] with spec argv[3], then until stdin
# closes opens its stream, reads one byte and closes it: each open is handed
# a whole record, framed for it, of which it reads next to nothing.
SIP_FOREVER = r"""
import os, select, sys
mnt, job, spec = sys.argv[1:4]
os.mkdir(os.path.join(mnt, "jobs", job))
with open(os.path.join(mnt, "jobs", job, "spec"), "w") as f:
    f.write(spec)
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    fd = os.open(os.path.join(mnt, "jobs", job, "next"), os.O_RDONLY)
    os.read(fd, 1)
    os.close(fd)
"""


def gradient_jpeg(path, side, shade):
    """A smooth side x side JPEG: small on disk, side^2 x 3 bytes decoded."""
    x = np.linspace(0, 255, side, dtype=np.uint8)
    rgb = np.stack([np.tile(x, (side, 1)), np.tile(x[:, None], (1, side)),
                    np.full((side, side), shade, np.uint8)], -1)
    Image.fromarray(rgb).save(path, quality=50)


class FairnessTest(JoaderTestCase):

    @classmethod
    def setUpClass(cls):
        require_binary()
        cls._data_dir = tempfile.mkdtemp(prefix="joaderfs-fair-")
        cls.big = os.path.join(cls._data_dir, "big")
        os.makedirs(os.path.join(cls.big, "c0"))
        gradient_jpeg(os.path.join(cls.big, "c0", "0.jpg"), BIG_SIDE, 40)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data_dir, True)

    def shared_mount(self, source, options):
        opts = {"allow_other": None}
        opts.update(options)
        m = self.mount(source, opts)
        os.chmod(m.workdir, 0o755)
        return m

    def nobody_readers(self, m, specs):
        procs = []
        for i, spec in enumerate(specs):
            p = subprocess.Popen(NOBODY + [sys.executable, "-c", SIP_FOREVER, m.mnt,
                                           "u%d-%d" % (i, time.monotonic_ns()), spec],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            self.addCleanup(p.kill)
            procs.append(p)
        for p in procs:
            self.assertEqual(p.stdout.readline().strip(), "ready", p.stderr.read() if p.poll() else "")
        return procs

    def status_read_median(self, m, job, seconds):
        """The median of root's open+read of its own job's status, in ms."""
        waits = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t = time.perf_counter()
            with open(m.path("jobs", job, "status"), "rb") as f:
                f.read()
            waits.append((time.perf_counter() - t) * 1e3)
            time.sleep(0.002)
        return statistics.median(waits), len(waits)

    def test_tfrecord_checksums_do_not_stall_other_users(self):
        """One reader of uid 65534 has a 432 MB record framed at each open
        (it reads one byte and closes): as TFRecords, each framing checksums
        every pixel. Root's reads of its own status wait no longer than
        beside JSF1 records; before, they waited for the checksums (median
        tens of ms)."""
        m = self.shared_mount(self.big, {"ram_cache": "1G", "base": "0",
                                         "max_pixels": str(BIG_SIDE ** 2)})
        m.mkjob("mine", spec="size=32")
        medians = {}
        for fmt in ("plain", "tfrecord", "plain", "tfrecord"):
            procs = self.nobody_readers(m, ["size=0 format=%s" % fmt])
            time.sleep(1.0)  # the image decoded, the reader at full speed
            wait, n = self.status_read_median(m, "mine", 2.0)
            medians.setdefault(fmt, []).append(wait)
            for p in procs:
                p.communicate("", timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr)
            sys.stderr.write("\n[fair] %s: root's status reads take %.1f ms (median of %d) "
                             "beside uid 65534's reader" % (fmt, wait, n))
        plain, tfrecord = min(medians["plain"]), min(medians["tfrecord"])
        self.assertLess(tfrecord, 2 * plain + 3,
                        "root waits on uid 65534's TFRecord checksums: %.1f ms against "
                        "%.1f ms beside JSF1 records" % (tfrecord, plain))


if __name__ == "__main__":
    unittest.main()
