"""An S3 bucket as SOURCE (issue 26): s3://BUCKET[/PREFIX] against a real
S3 server on loopback (moto, signatures checked), through a proxy of ours
that counts GETs and fails chosen ones (harness/s3.py).

The bucket holds one ImageFolder tree (keys folder/<class>/<image>), the
same photos as WebDataset shards (shards/*.tar, written as test_tar does)
and a manifest object. Each layout must serve the local tree's (label,
pixels), each sample once per epoch; failed GETs are retried, and a GET
that always fails costs only its sample, counted; a changed object is never
served stale, and the disk tier serves a remount without a GET.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import (JoaderTestCase, ids_of, imagefolder_order, make_imagefolder,
                     read_epoch, reference_pixels, rewrite_image)
from harness.s3 import Proxy, S3Server
from test_tar import LAYOUT, write_shards

BUCKET = "data"


def digest(r):
    return hashlib.sha1(r.payload).hexdigest(), r.height, r.width


def same_size_other_picture(original, out):
    """Writes to `out` a JPEG of other pixels, as many bytes as `original`
    (zeros after its end marker, which decoders ignore); returns `out`."""
    from PIL import Image
    with Image.open(original) as im:
        w, h = im.size
    size = os.path.getsize(original)
    shutil.copy(original, out)
    for quality in range(90, 0, -10):
        rewrite_image(out, seed=99)
        with Image.open(out) as im:
            im.save(out, "JPEG", quality=quality)
        if os.path.getsize(out) <= size:
            break
    with open(out, "ab") as f:
        f.write(b"\0" * (size - os.path.getsize(out)))
    assert os.path.getsize(out) == size
    return out


def multiset(records_per_reader):
    return sorted((r.label, digest(r)) for rs in records_per_reader for r in rs)


class S3SourceTest(JoaderTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-s3-")
        cls.folder = make_imagefolder(os.path.join(cls._data, "folder"), LAYOUT)
        cls.order = imagefolder_order(cls.folder)
        photos = [(rel, label, os.path.join(cls.folder, rel)) for rel, label in cls.order]
        cls.shards = os.path.join(cls._data, "shards")
        cls.expected = write_shards(photos, cls.shards)
        cls.s3 = S3Server()
        try:
            cls.s3.bucket(BUCKET)
            cls.s3.upload_tree(BUCKET, "folder", cls.folder)
            cls.s3.upload_tree(BUCKET, "shards", cls.shards)
            manifest = "".join("folder/%s\t%d\n" % (rel, label) for rel, label in cls.order)
            cls.s3.put_bytes(BUCKET, "all.tsv", manifest.encode())
        except BaseException:
            cls.s3.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.s3.stop()
        shutil.rmtree(cls._data, True)

    def setUp(self):
        self.proxy = Proxy(self.s3.port)
        self.addCleanup(self.proxy.stop)
        self.set_env(self.s3.env())

    def mount_s3(self, prefix, options=None, **kwargs):
        opts = {"s3_endpoint": self.proxy.endpoint, "retry_failed": "1"}
        opts.update(options or {})
        return self.mount("s3://%s/%s" % (BUCKET, prefix), options=opts, **kwargs)

    def epoch(self, m, job="one", readers=2):
        return read_epoch(m.mkjob(job, spec="epochs=1"), readers=readers)

    # -- the three layouts

    def test_imagefolder_keys_serve_the_local_tree(self):
        local = self.mount(self.folder)
        want = multiset(self.epoch(local))
        m = self.mount_s3("folder")
        self.assertEqual(m.manifest(), local.manifest())
        self.assertEqual(m.info()["classes"], len(LAYOUT))
        self.assertEqual(multiset(self.epoch(m)), want)
        stats = m.stats()
        self.assertEqual(stats["skipped"], 0)
        self.assertGreater(stats["source_bytes"], 0)
        self.assertEqual(stats["source_requests"], self.proxy.total_gets())
        # The default bound on bytes in flight (DefaultSourceInFlight).
        self.assertGreaterEqual(stats["source_in_flight_limit"], 64 << 20)
        self.assertLessEqual(stats["source_in_flight_limit"], 1 << 30)

    def test_source_in_flight_bounds_the_reads(self):
        """source_in_flight= below one image: the reads run one at a time
        (one read always may), every sample is still served once."""
        m = self.mount_s3("folder", {"source_in_flight": "1K", "source_reads": "8"})
        self.assertEqual(m.stats()["source_in_flight_limit"], 1024)
        records = [r for rs in self.epoch(m) for r in rs]
        self.assertEqual(sorted(r.id for r in records), list(range(len(self.order))))
        self.assertEqual(self.proxy.max_concurrent_gets, 1)

    def test_reads_running_and_queued_are_shown(self):
        """/stats shows the reads under way (at most source_reads) and those
        waiting, as the store sees them; both are 0 once the epoch is read."""
        m = self.mount_s3("folder", {"source_reads": "3"})
        self.proxy.reset_counts()
        self.proxy.delay = 0.05
        seen = []
        reading = threading.Thread(target=lambda: seen.append(self.epoch(m)))
        reading.start()
        running, queued = [], []
        while reading.is_alive():
            stats = m.stats()
            running.append(stats["source_reads_running"])
            queued.append(stats["source_reads_queued"])
            time.sleep(0.01)
        reading.join()
        self.assertEqual(len(seen), 1)
        self.assertEqual(self.proxy.max_concurrent_gets, 3)
        self.assertEqual(max(running), 3, running)
        self.assertGreater(max(queued), 0, queued)  # the plan runs ahead of 3 reads
        stats = m.stats()
        self.assertEqual((stats["source_reads_running"], stats["source_reads_queued"]), (0, 0))

    def test_tar_shards_serve_the_local_shards(self):
        local = self.mount(self.shards)
        want = multiset(self.epoch(local))
        m = self.mount_s3("shards")
        self.assertEqual(m.manifest(), local.manifest())
        self.assertEqual(multiset(self.epoch(m)), want)
        self.assertIn("left out 1 samples of damaged or cut-short shards",
                      "\n".join(m.log_problems()))

    def test_listing_past_one_page(self):
        """ListObjectsV2 answers 1000 keys a page (moto as S3): a bucket of
        1010 images needs the continuation token, and each is served once."""
        from PIL import Image
        root = os.path.join(self.tempdir(), "many")
        n = 1010
        for i in range(n):
            folder = os.path.join(root, "c%d" % (i % 3))
            os.makedirs(folder, exist_ok=True)
            Image.new("RGB", (8, 8), (i % 251, i // 251 * 40, 90)).save(
                os.path.join(folder, "%04d.jpg" % i), "JPEG")
        self.s3.upload_tree(BUCKET, "many", root)
        m = self.mount_s3("many")
        self.assertEqual(len(m.manifest()), n)
        self.assertEqual(m.info()["classes"], 3)
        records = [r for rs in self.epoch(m) for r in rs]
        self.assertEqual(sorted(r.id for r in records), list(range(n)))
        self.assertEqual(self.proxy.total_gets(), n)

    def test_tar_members_coalesce_into_ranged_reads(self):
        """One I/O thread, 50 ms a request: the planned members queue, and
        neighbours in one shard are fetched by one ranged GET, each still
        served with its own pixels."""
        local = self.mount(self.shards)
        want = multiset(self.epoch(local))
        m = self.mount_s3("shards", {"source_reads": "1"})
        self.proxy.reset_counts()  # the scan's GETs
        self.proxy.delay = 0.05
        self.assertEqual(multiset(self.epoch(m)), want)
        stats = m.stats()
        n = len(self.expected)
        gets = self.proxy.total_gets()
        self.assertGreater(stats["source_reads_coalesced"], 0)
        self.assertLess(gets, n / 2, self.proxy.ranges)
        self.assertEqual(gets + stats["source_reads_coalesced"], n)  # each member read once
        self.assertEqual(stats["skipped"], 0)

    def test_manifest_object(self):
        local = self.mount(self.folder)
        want = multiset(self.epoch(local))
        m = self.mount_s3("all.tsv")
        self.assertEqual(len(m.manifest()), len(self.order))
        self.assertEqual(multiset(self.epoch(m)), want)

    def test_each_sample_once_per_epoch(self):
        for prefix, n in (("folder", len(self.order)), ("shards", len(self.expected))):
            m = self.mount_s3(prefix)
            path = m.mkjob("two", spec="epochs=2")
            for epoch in range(2):
                records = [r for rs in read_epoch(path, readers=3) for r in rs]
                self.assertEqual(sorted(r.id for r in records), list(range(n)),
                                 "%s epoch %d" % (prefix, epoch))

    # -- failures

    def test_get_that_fails_twice_then_succeeds(self):
        rel = self.order[3][0]
        self.proxy.fail("folder/" + rel, times=2)
        m = self.mount_s3("folder")
        records = [r for rs in self.epoch(m) for r in rs]
        self.assertEqual(sorted(r.id for r in records), list(range(len(self.order))))
        self.assertEqual(self.proxy.failed.get("folder/" + rel), 2)
        self.assertEqual(self.proxy.gets["folder/" + rel], 3)
        stats = m.stats()
        self.assertEqual(stats["skipped"], 0)
        self.assertEqual(stats["source_retries"], 2)
        self.assertEqual(stats["source_failures"], 0)

    def test_get_that_always_fails_is_skipped_counted_and_heals(self):
        rel = self.order[5][0]
        key = "folder/" + rel
        self.proxy.fail(key)
        m = self.mount_s3("folder")
        start = time.monotonic()
        got = ids_of(self.epoch(m))
        self.assertLess(time.monotonic() - start, 30)  # bounded retries, no hang
        self.assertEqual(sorted(got), [i for i in range(len(self.order)) if i != 5])
        stats = m.stats()
        self.assertEqual(stats["skipped"], 1)
        self.assertEqual(stats["source_failures"], 1)
        self.assertEqual(self.proxy.failed[key], 4)  # S3Options::attempts
        self.assertIn("skipping sample 5", "\n".join(m.log_problems()))
        # Heals as an unreadable file does: once the back-off has passed.
        self.proxy.heal(key)
        time.sleep(2.5)
        records = [r for rs in read_epoch(m.mkjob("again", ids="5\n")) for r in rs]
        self.assertEqual([r.id for r in records], [5])
        self.assertEqual(m.stats()["skipped"], 0)

    def test_wrong_credentials_fail_the_mount(self):
        self.set_env({"AWS_ACCESS_KEY_ID": self.s3.access_key,
                      "AWS_SECRET_ACCESS_KEY": "not-the-secret-" + "x" * 20})
        m = self.mount_s3("folder", start=False)
        with self.assertRaises(AssertionError) as e:
            m.start()
        self.assertEqual(m.returncode, 1)
        with open(m.stderr_path) as f:
            stderr = f.read()
        self.assertIn("SOURCE s3://data/folder cannot be listed", stderr)
        self.assertIn("SignatureDoesNotMatch", stderr)
        self.assertIn("check the credentials", stderr)
        self.assertEqual(stderr.count("\n"), 1, stderr)  # one line
        self.assertNotIn("not-the-secret", stderr + str(e.exception))

    def test_no_credentials_fail_the_mount(self):
        self.set_env({"AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.tempdir(), "none")},
                     remove=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
        m = self.mount_s3("folder", start=False)
        with self.assertRaises(AssertionError):
            m.start()
        with open(m.stderr_path) as f:
            self.assertIn("no S3 credentials", f.read())

    def test_credentials_file_profile_and_no_secret_shown(self):
        creds = os.path.join(self.tempdir(), "credentials")
        with open(creds, "w") as f:
            f.write("[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n"
                    "[train]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                    % (self.s3.access_key, self.s3.secret_key))
        self.set_env({"AWS_SHARED_CREDENTIALS_FILE": creds, "AWS_PROFILE": "train"},
                     remove=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
        m = self.mount_s3("folder")
        self.assertEqual(len(ids_of(self.epoch(m))), len(self.order))
        with open("/proc/%d/cmdline" % m.proc.pid, "rb") as f:
            cmdline = f.read().decode()
        shown = m.read_text("stats") + m.read_text("metrics") + cmdline
        self.assertEqual(m.unmount(), 0)
        with open(m.log_path) as f:
            shown += f.read()
        self.assertNotIn(self.s3.secret_key, shown)
        self.assertNotIn(self.s3.access_key, shown)

    # -- identity and the disk tier

    def test_disk_tier_across_a_remount_needs_no_get(self):
        cache = os.path.join(self.tempdir(), "cache")
        opts = {"cache_dir": cache}
        m = self.mount_s3("folder", opts)
        first = {r.id: r.payload for rs in self.epoch(m) for r in rs}
        self.assertEqual(len(first), len(self.order))
        self.assertEqual(m.unmount(), 0)
        self.proxy.reset_counts()
        m = self.mount_s3("folder", opts)
        second = {r.id: r.payload for rs in self.epoch(m, "two") for r in rs}
        self.assertEqual(second, first)
        self.assertEqual(self.proxy.total_gets(), 0, self.proxy.gets)
        self.assertGreaterEqual(m.stats()["disk_hits"], len(self.order))

    def test_changed_object_is_not_served_stale(self):
        """One object is replaced by another picture of the same size (only
        its ETag tells them apart): after a remount with the disk tier,
        which held the old one, its decode has the new pixels."""
        cache = os.path.join(self.tempdir(), "cache")
        opts = {"cache_dir": cache, "ram_cache": "8M"}
        rel = self.order[2][0]
        key = "folder/" + rel
        changed = same_size_other_picture(os.path.join(self.folder, rel),
                                          os.path.join(self.tempdir(), "changed.jpg"))
        self.addCleanup(self.s3.put, BUCKET, key, os.path.join(self.folder, rel))
        m = self.mount_s3("folder", opts)
        old = {r.id: r.payload for rs in self.epoch(m) for r in rs}
        self.assertEqual(m.unmount(), 0)
        old_etag = self.s3.etag(BUCKET, key)
        self.s3.put(BUCKET, key, changed)
        self.assertNotEqual(self.s3.etag(BUCKET, key), old_etag)
        self.proxy.reset_counts()
        m = self.mount_s3("folder", opts)
        new = {r.id: r for rs in self.epoch(m, "two") for r in rs}
        self.assertNotEqual(new[2].payload, old[2])
        ref = reference_pixels(changed, 64).astype("int16")
        mad = float(abs(new[2].pixels().astype("int16") - ref).mean())
        self.assertLess(mad, 6.0)
        # Only the changed object was fetched; the rest came from disk.
        self.assertEqual(self.proxy.gets, {key: 1})
        for i, payload in old.items():
            if i != 2:
                self.assertEqual(new[i].payload, payload, i)


if __name__ == "__main__":
    unittest.main()
