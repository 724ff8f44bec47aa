"""A remount with the same cache_dir takes the catalog from its snapshot
(issue 44, item 3): the classes whose folders did not change are not listed
again, and a class folder added between the mounts is in the catalog with
the labels and ids a full scan gives.

Run: JOADERFS_BIN=build/joaderfs python3 -m unittest -v test_catalog_snapshot
(from tests/integration)."""

import os
import time
import unittest

from harness import (JoaderTestCase, ids_of, imagefolder_order, make_imagefolder,
                     read_epoch)

LAYOUT = {"ant": ["a0.jpg", "a1.jpg", "a2.jpg"], "cat": ["c0.jpg", "c1.jpg"],
          "dog": ["d0.jpg", "d1.jpg", "d2.jpg"]}


class CatalogSnapshotTest(JoaderTestCase):

    def test_remount_lists_only_what_changed(self):
        source = make_imagefolder(os.path.join(self.tempdir(), "src"), LAYOUT)
        cache_dir = os.path.join(self.tempdir(), "cache")
        os.mkdir(cache_dir)
        # Folders changed within 2 s of a scan are not trusted by the next.
        time.sleep(2.1)
        m = self.mount(source, {"cache_dir": cache_dir})
        self.assertEqual(m.info()["samples"], 8)
        m.unmount()
        self.assertTrue(any(n.endswith("-catalog1") for n in os.listdir(cache_dir)))

        make_imagefolder(source, {"bee": ["b0.jpg", "b1.jpg"]}, seed=1)
        m = self.mount(source, {"cache_dir": cache_dir})
        expected = imagefolder_order(source)
        self.assertEqual(m.info()["samples"], 10)
        self.assertEqual(m.info()["classes"], 4)
        self.assertEqual([(label, rel) for _, label, rel in m.manifest()],
                         [(label, rel) for rel, label in expected])
        with open(m.log_path, errors="replace") as f:
            self.assertIn("1 of 4 classes listed again", f.read())
        ids = ids_of(read_epoch(m.mkjob("all"), timeout=30))
        self.assertEqual(sorted(ids), list(range(10)))


if __name__ == "__main__":
    unittest.main()
