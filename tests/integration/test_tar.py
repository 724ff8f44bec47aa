"""WebDataset tar shards as SOURCE (issue 19, items 1 and 2).

The shards are written here with Python's tarfile in the WebDataset layout
(`key.jpg` + `key.cls`, or `key.json` holding the label), from the same
photos as an ImageFolder dataset, with samples that have no label, a key
with no image, a non-image member beside an image, and a last shard cut
short inside a member. The tar mount must serve exactly the samples that
survive, with the ImageFolder mount's (label, pixels), each once per epoch.
"""

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import unittest

import harness
from harness import (JoaderTestCase, ids_of, imagefolder_order, make_imagefolder,
                     read_epoch)

LAYOUT = {c: ["%s%d.jpg" % (c, i) for i in range(6)]
          for c in ("ant", "bee", "cat", "dog")}
SHARDS = 3
UNLABELED = {"s00004", "s00013"}  # image members without .cls or .json
JSON_LABELLED = {"s00009", "s00010", "s00011"}  # label in key.json


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def write_shards(photos, out):
    """photos: [(relpath in the ImageFolder, label, path)]; writes SHARDS
    shards of consecutive keys; returns [(relpath in the tar mount, label,
    ImageFolder relpath)] for the samples that must survive."""
    os.makedirs(out)
    per = (len(photos) + SHARDS - 1) // SHARDS
    expected = []
    for k in range(SHARDS):
        shard = "shard-%03d.tar" % k
        with tarfile.open(os.path.join(out, shard), "w", format=tarfile.PAX_FORMAT) as tar:
            if k == 0:
                add(tar, "readme.txt", b"no image here\n")  # a key with no image
            for i in range(k * per, min(len(photos), (k + 1) * per)):
                rel, label, path = photos[i]
                key = "s%05d" % i
                with open(path, "rb") as f:
                    add(tar, key + ".jpg", f.read())
                if key in JSON_LABELLED:
                    add(tar, key + ".json", json.dumps({"cls": label, "w": 1}).encode())
                elif key not in UNLABELED:
                    add(tar, key + ".cls", b"%d" % label)
                if i == 1:
                    add(tar, key + ".txt", b"a caption, not an image")
                expected.append((shard + "/" + key + ".jpg",
                                 -1 if key in UNLABELED else label, rel))
    # Cut the last shard inside its last image: that sample is lost, the
    # rest of the shard serves.
    last = os.path.join(out, "shard-%03d.tar" % (SHARDS - 1))
    with tarfile.open(last) as tar:
        member = tar.getmembers()[-2]  # the last .jpg, before its .cls
    os.truncate(last, member.offset_data + member.size // 2)
    expected.pop()
    return expected


class TarSourceTest(JoaderTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-tar-")
        cls.folder = make_imagefolder(os.path.join(cls._data, "folder"), LAYOUT)
        photos = [(rel, label, os.path.join(cls.folder, rel))
                  for rel, label in imagefolder_order(cls.folder)]
        cls.shards = os.path.join(cls._data, "shards")
        cls.expected = write_shards(photos, cls.shards)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def test_manifest_info_and_log(self):
        m = self.mount(self.shards)
        self.assertEqual([(rel, label) for _, label, rel in m.manifest()],
                         [(rel, label) for rel, label, _ in self.expected])
        info = m.info()
        self.assertEqual(info["samples"], len(self.expected))
        self.assertEqual(info["classes"], len(LAYOUT))
        problems = "\n".join(m.log_problems())
        self.assertIn("left out 1 samples of damaged or cut-short shards", problems)
        self.assertIn("left out 1 shard keys with no jpg", problems)
        self.assertIn("2 samples have no label", problems)

    def test_same_samples_as_the_imagefolder(self):
        """Same photos: the same multiset of (label, pixels), unlabeled
        samples aside (label -1 in the tar mount)."""
        def epoch(source):
            m = self.mount(source)
            return read_epoch(m.mkjob("one", spec="epochs=1"), readers=2)

        def digest(r):
            return hashlib.sha1(r.payload).hexdigest(), r.height, r.width

        by_rel = {}
        for r in [r for rs in epoch(self.folder) for r in rs]:
            by_rel[imagefolder_order(self.folder)[r.id][0]] = (r.label, digest(r))
        want = sorted(by_rel[rel] if label >= 0 else (-1, by_rel[rel][1])
                      for _, label, rel in self.expected)
        got = sorted((r.label, digest(r)) for rs in epoch(self.shards) for r in rs)
        self.assertEqual(got, want)

    def test_each_sample_once_per_epoch(self):
        m = self.mount(self.shards)
        path = m.mkjob("two", spec="epochs=2")
        for epoch in range(2):
            records = [r for rs in read_epoch(path, readers=3) for r in rs]
            self.assertEqual(sorted(r.id for r in records),
                             list(range(len(self.expected))), "epoch %d" % epoch)
            self.assertTrue(all(r.epoch == epoch for r in records))
            for r in records:
                self.assertEqual(r.label, self.expected[r.id][1], r)

    def test_label_key_option(self):
        """label_key=w reads field w of the .json members: only the
        JSON-labelled samples get a label (1); the others have none."""
        m = self.mount(self.shards, options={"label_key": "w"})
        labels = {rel: label for _, label, rel in m.manifest()}
        for rel, _, _ in self.expected:
            key = rel.split("/")[1].split(".")[0]
            self.assertEqual(labels[rel], 1 if key in JSON_LABELLED else -1, rel)

    def test_labels_agree_with_the_webdataset_reader(self):
        """The mount's stream beside the webdataset package's own reader
        over the same shards: the same keys with images (the cut-short one
        aside) and the same label for each."""
        try:
            import webdataset as wds
        except ImportError:
            self.skipTest("the webdataset package is not installed "
                          "(scripts/setup.sh installs webdataset==1.0.2 in .venv-test)")
        urls = [os.path.join(self.shards, "shard-%03d.tar" % k)
                for k in range(SHARDS)]
        theirs = {}
        for sample in wds.WebDataset(urls, shardshuffle=False,
                                     handler=wds.warn_and_continue):
            if "jpg" not in sample:
                continue
            if "cls" in sample:
                label = int(sample["cls"])
            elif "json" in sample:
                label = json.loads(sample["json"])["cls"]
            else:
                label = -1
            theirs[sample["__key__"]] = (label, sample["jpg"])
        m = self.mount(self.shards)
        keys = [rel.split("/", 1)[1].rsplit(".", 1)[0]
                for _, _, rel in m.manifest()]
        records = [r for rs in read_epoch(m.mkjob("wds", spec="epochs=1 size=0"))
                   for r in rs]
        self.assertEqual(len(records), len(keys))
        for r in records:
            self.assertEqual(r.label, theirs[keys[r.id]][0], keys[r.id])
        lost = set(theirs) - set(keys)
        self.assertLessEqual(len(lost), 1, lost)  # at most the cut member

    def test_disk_tier_and_jobs_survive_a_remount(self):
        """With a cache_dir, a tar mount's decoded samples and jobs come
        back after a remount: the second epoch is served from disk, with
        the same pixels."""
        cache = os.path.join(self.tempdir(), "cache")
        opts = {"cache_dir": cache, "ram_cache": "64M"}
        m = self.mount(self.shards, options=opts)
        first = {r.id: r.payload for rs in read_epoch(m.mkjob("keep", spec="epochs=2"))
                 for r in rs}
        self.assertEqual(len(first), len(self.expected))
        self.assertEqual(m.unmount(), 0)
        m = self.mount(self.shards, options=opts)
        self.assertIn("keep", os.listdir(m.path("jobs")))
        second = {r.id: r.payload
                  for rs in read_epoch(m.path("jobs", "keep", "next")) for r in rs}
        self.assertEqual(second, first)
        self.assertGreaterEqual(m.stats()["disk_hits"], len(self.expected))

    def test_ranks_augmentation_and_resume_by_relpath(self):
        """Ranks, random crops and flips, and a resume naming tar relpaths
        work on shards as on files."""
        m = self.mount(self.shards)
        n = len(self.expected)
        m.mkjob("r", spec="ranks=2 crop=random flip=0.5 epochs=1")
        ranks = [[r for rs in read_epoch(m.path("jobs", "r", "next.%d" % k))
                  for r in rs] for k in range(2)]
        self.assertEqual([len(rs) for rs in ranks], [(n + 1) // 2] * 2)
        self.assertEqual(sorted({r.id for rs in ranks for r in rs}),
                         list(range(n)))
        consumed = [rel for rel, _, _ in self.expected[3:8]]
        m.mkjob("s", spec="epochs=1")
        m.write_file("s", "resume", "epoch=0\n" + "".join(r + "\n" for r in consumed))
        rest = sorted(r.id for rs in read_epoch(m.path("jobs", "s", "next"))
                      for r in rs)
        self.assertEqual(rest, [i for i in range(n) if not 3 <= i < 8])

    def test_changed_shard_is_detected(self):
        """A shard rewritten under the mount (its size and time change)
        serves none of its stale offsets: its samples are skipped and
        counted, the other shards serve."""
        source = os.path.join(self.tempdir(), "copy")
        shutil.copytree(self.shards, source)
        m = self.mount(source)
        first = os.path.join(source, "shard-000.tar")
        with open(first, "ab") as f:
            f.write(b"\0" * 10240)
        in_first = [i for i, (rel, _, _) in enumerate(self.expected)
                    if rel.startswith("shard-000.tar/")]
        records = read_epoch(m.mkjob("after", spec="epochs=1"))
        got = sorted(ids_of(records))  # the lone reader's repeats left out
        self.assertEqual(got, [i for i in range(len(self.expected))
                               if i not in in_first])
        self.assertEqual(m.status("after")["skipped"], len(in_first))
        self.assertTrue(any("changed since the scan" in line
                            for line in m.log_problems()), m.log_problems())


if __name__ == "__main__":
    unittest.main()
