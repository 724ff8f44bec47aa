"""Per-job augmentation on shared decodes (docs/design.md 2.3, 2.4): crop=,
flip= and seed= checked against torchvision, record flags and crop boxes,
and one decode per image for jobs of different size, crop and flip.

The dataset is PNGs, which the daemon keeps at full size as their base
image, so an independent PIL decode is the daemon's base image and
torchvision can be run on exactly what the daemon cut from.
"""

import math
import os
import subprocess
import sys
import tempfile
import shutil
import unittest

import numpy as np
from PIL import Image

import harness
from harness import JoaderTestCase, read_epoch, ids_of

FLIPPED = 1
CROP_BOX = 2
P_FLOOR = 1e-3  # reject a distribution test below this p-value


def unpack_box(crop_box):
    return (crop_box & 0xffff, (crop_box >> 16) & 0xffff,
            (crop_box >> 32) & 0xffff, (crop_box >> 48) & 0xffff)


def ks_2samp_p(a, b):
    """Two-sample Kolmogorov-Smirnov test: the asymptotic p-value of the
    largest gap between the empirical CDFs (Numerical Recipes' ksprob)."""
    a, b = np.sort(a), np.sort(b)
    both = np.concatenate([a, b])
    gap = np.abs(np.searchsorted(a, both, side="right") / len(a)
                 - np.searchsorted(b, both, side="right") / len(b)).max()
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * gap
    if lam < 1e-3:
        return 1.0
    return min(1.0, max(0.0, 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam)
                                     for j in range(1, 101))))


def binom_half_p(k, n):
    """Exact two-sided binomial test of k successes in n draws, p = 1/2."""
    probs = [math.comb(n, i) for i in range(n + 1)]
    return min(1.0, sum(q for q in probs if q <= probs[k]) / 2 ** n)


def by_id(records_per_reader):
    return {r.id: r for rs in records_per_reader for r in rs}


# A reader in its own process: reads one epoch to EOF, prints the count.
READER = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
n = 0
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    n += len(b)
os.close(fd)
print(n)
"""

# READER that opens its stream, says "ready" and reads once told to go.
GATED_READER = READER.replace("n = 0\n", "print('ready', flush=True)\ninput()\nn = 0\n", 1)

# READER that takes its first sample, says "started" and reads the rest once
# told to go: a job whose epoch runs, far behind a peer.
LAGGING_READER = READER.replace(
    "n = 0\n", "n = len(os.read(fd, 1))\nprint('started', flush=True)\ninput()\n", 1)


class AugmentTest(JoaderTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data_dir = tempfile.mkdtemp(prefix="joaderfs-data-")
        cls.source = os.path.join(cls._data_dir, "src")
        rng = np.random.default_rng(3)
        cls.images = []
        for k in range(60):
            cls_name = "c%d" % (k % 3)
            os.makedirs(os.path.join(cls.source, cls_name), exist_ok=True)
            w, h = harness.SIZES[k % len(harness.SIZES)]
            rel = "%s/i%02d.png" % (cls_name, k)
            harness._image(rng, w, h).save(os.path.join(cls.source, rel))
        cls.order = harness.imagefolder_order(cls.source)
        cls.N = len(cls.order)
        cls.pictures = [np.asarray(Image.open(os.path.join(cls.source, rel))
                                   .convert("RGB"))
                        for rel, _ in cls.order]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data_dir, True)

    def epochs(self, m, job, n):
        path = m.path("jobs", job, "next")
        return [by_id(read_epoch(path)) for _ in range(n)]

    # -- crop boxes and flips, statistically

    def test_boxes_and_flips_follow_torchvision(self):
        import torch
        from torchvision import transforms
        m = self.mount(self.source)
        m.mkjob("r", spec="size=32 crop=random flip=0.5")
        areas, ratios, flips = [], [], 0
        shapes = []
        for epoch in self.epochs(m, "r", 12):
            self.assertEqual(len(epoch), self.N)
            for r in epoch.values():
                self.assertEqual(r.flags & CROP_BOX, CROP_BOX, r)
                self.assertEqual((r.height, r.width), (32, 32), r)
                x, y, w, h = unpack_box(r.crop_box)
                H, W = self.pictures[r.id].shape[:2]
                self.assertTrue(0 < w and 0 < h and x + w <= W and y + h <= H,
                                (r, x, y, w, h, W, H))
                areas.append(w * h / (W * H))
                ratios.append(math.log(w / h))
                flips += r.flags & FLIPPED
                shapes.append((W, H))
        torch.manual_seed(0)
        crop = transforms.RandomResizedCrop(32)
        ref_areas, ref_ratios = [], []
        for W, H in shapes * 4:
            i, j, h, w = crop.get_params(torch.empty(3, H, W), crop.scale,
                                         crop.ratio)
            ref_areas.append(w * h / (W * H))
            ref_ratios.append(math.log(w / h))
        p_area = ks_2samp_p(areas, ref_areas)
        p_ratio = ks_2samp_p(ratios, ref_ratios)
        p_flip = binom_half_p(flips, len(shapes))
        sys.stderr.write("\n%d boxes: KS p area %.3g, log-ratio %.3g; "
                         "%d flips, binomial p %.3g\n"
                         % (len(shapes), p_area, p_ratio, flips, p_flip))
        self.assertGreater(p_area, P_FLOOR)
        self.assertGreater(p_ratio, P_FLOOR)
        self.assertGreater(p_flip, P_FLOOR)

    # -- pixels

    def test_pixels_match_torchvision_resized_crop(self):
        import torch
        from torchvision.transforms import functional as F
        m = self.mount(self.source)
        m.mkjob("r", spec="size=48 crop=random:0.2-1:0.5-2 flip=0.5")
        (epoch,) = self.epochs(m, "r", 1)
        mads = []
        for r in epoch.values():
            x, y, w, h = unpack_box(r.crop_box)
            t = torch.from_numpy(self.pictures[r.id].copy()).permute(2, 0, 1)
            ref = F.resized_crop(t, y, x, h, w, [48, 48], antialias=True)
            if r.flags & FLIPPED:
                ref = F.hflip(ref)
            ref = ref.permute(1, 2, 0).numpy().astype(np.int16)
            mads.append(float(np.abs(r.pixels().astype(np.int16) - ref)
                              .mean()))
        sys.stderr.write("\nMAD vs torchvision resized_crop: mean %.3f, "
                         "worst %.3f\n" % (np.mean(mads), max(mads)))
        self.assertLess(max(mads), 1.0)

    # -- seeds and flips

    def test_seed_decides_augmentations(self):
        m = self.mount(self.source)
        m.mkjob("a", spec="size=32 crop=random flip=0.5 seed=5")
        m.mkjob("b", spec="size=32 crop=random flip=0.5 seed=5")
        m.mkjob("c", spec="size=32 crop=random flip=0.5 seed=6")
        a0, a1 = self.epochs(m, "a", 2)
        (b0,) = self.epochs(m, "b", 1)
        (c0,) = self.epochs(m, "c", 1)
        for i in range(self.N):
            self.assertEqual((a0[i].flags, a0[i].crop_box),
                             (b0[i].flags, b0[i].crop_box), i)
            self.assertEqual(a0[i].payload, b0[i].payload, i)
        same_seed = sum(a0[i].crop_box == c0[i].crop_box for i in range(self.N))
        same_epoch = sum(a0[i].crop_box == a1[i].crop_box
                         for i in range(self.N))
        self.assertLess(same_seed, self.N // 10)
        self.assertLess(same_epoch, self.N // 10)

    def test_flip_one_mirrors_flip_zero(self):
        m = self.mount(self.source)
        for crop in ("center", "random"):
            with self.subTest(crop=crop):
                m.mkjob("p" + crop, spec="crop=%s flip=0 seed=9" % crop)
                m.mkjob("f" + crop, spec="crop=%s flip=1 seed=9" % crop)
                (plain,) = self.epochs(m, "p" + crop, 1)
                (flipped,) = self.epochs(m, "f" + crop, 1)
                for i in range(self.N):
                    self.assertEqual(plain[i].flags & FLIPPED, 0)
                    self.assertEqual(flipped[i].flags & FLIPPED, FLIPPED)
                    self.assertEqual(plain[i].crop_box, flipped[i].crop_box)
                    np.testing.assert_array_equal(
                        plain[i].pixels()[:, ::-1], flipped[i].pixels(),
                        "id %d" % i)
                    if crop == "center":
                        self.assertEqual(plain[i].flags, 0)
                        self.assertEqual(plain[i].crop_box, 0)

    def test_default_seed_is_shown_and_stable(self):
        seeds = []
        for _ in range(2):
            m = self.mount(self.source)
            m.mkjob("j")
            m.mkjob("k", spec="crop=random")
            spec = m.read_spec("j")
            self.assertEqual(spec["crop"], "center")
            self.assertEqual(spec["flip"], "0")
            seeds.append((spec["seed"], m.read_spec("k")["seed"]))
            m.unmount()
        self.assertEqual(seeds[0], seeds[1])
        self.assertNotEqual(seeds[0][0], seeds[0][1])

    def test_bad_values_are_refused(self):
        import errno
        m = self.mount(self.source)
        m.mkjob("j", spec="crop=random flip=0.25 seed=3")
        good = m.read_spec("j")
        for text in ("crop=middle", "crop=random:0-1:0.75-1.33",
                     "crop=random:0.5-0.2:0.75-1.33", "crop=random:0.1-1",
                     "crop=random:0.1-1.5:1-2", "flip=2", "flip=-0.5",
                     "flip=x", "seed=-1", "seed=abc"):
            with self.subTest(spec=text):
                self.assertErrno(errno.EINVAL, m.write_spec, "j", text)
                self.assertEqual(m.read_spec("j"), good)

    # -- shared decodes

    def test_jobs_of_any_size_crop_and_flip_decode_once(self):
        m = self.mount(self.source, {"ram_cache": "256M"})
        specs = {"small": "size=32", "rand": "size=48 crop=random flip=0.5",
                 "full": "size=0 crop=random:0.5-1:0.75-1.33 flip=1"}
        for job, spec in specs.items():
            m.mkjob(job, spec=spec)
        procs = [subprocess.Popen([sys.executable, "-c", READER,
                                   m.path("jobs", job, "next")],
                                  stdout=subprocess.PIPE)
                 for job in specs]
        for p in procs:
            out, _ = p.communicate(timeout=harness.EPOCH_TIMEOUT)
            self.assertEqual(p.returncode, 0)
            self.assertGreater(int(out), 0)
        stats = m.stats()
        for job in specs:
            self.assertEqual(stats["jobs"][job]["delivered"], self.N, job)
        self.assertEqual(stats["decoded"], self.N)


class SharedRenderTest(JoaderTestCase):
    """Jobs that would cut the same picture share one render of it."""

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data_dir = tempfile.mkdtemp(prefix="joaderfs-data-")
        cls.source = os.path.join(cls._data_dir, "src")
        cls.N = 300
        # ImageNet-like JPEGs (about 400 x 360): decodes that take as long
        # as real ones keep the jobs' pace, as it is in real use.
        gendata = os.path.join(os.path.dirname(harness.BIN), "joaderfs-gendata")
        subprocess.run([gendata, cls.source, "--images", str(cls.N), "--classes", "3"],
                       check=True, stdout=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data_dir, True)

    def test_identical_centre_crops_are_rendered_once(self):
        """Two pairs of jobs whose centre crops agree (same size; flip 0,
        or flip 1), other seeds, started together as a sweep's jobs are:
        about two renders per image, not four; the random-crop job's
        renders are its own."""
        # base=256, as in training: the harness's base=64 decodes these
        # pictures at 2/8, so fast that the readers, not the decodes, set
        # the pace, and a reader the scheduler held back for a few ms fell
        # out of its pair's rounds (renders ran 900-1203 against 900-931).
        m = self.mount(self.source, {"ram_cache": "256M", "base": "256"})
        specs = {"a": "size=40 seed=1", "b": "size=40 seed=2",
                 "c": "size=40 seed=3 flip=1", "d": "size=40 seed=4 flip=1",
                 "r": "size=40 crop=random"}
        for job, spec in specs.items():
            m.mkjob(job, spec=spec)
        # A barrier, as a sweep's jobs start together: each reader opens its
        # stream and says so before any is let go. (The epoch lasts a few
        # hundred milliseconds here, against minutes in training: on a loaded
        # machine a reader that opened after the others were let go started
        # 60-300 ms late, a third of the epoch or more, and shared little.)
        procs = [subprocess.Popen([sys.executable, "-c", GATED_READER,
                                   m.path("jobs", job, "next")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                 for job in specs]
        for p in procs:
            self.assertEqual(p.stdout.readline(), b"ready\n")
        for p in procs:  # all read at once
            p.stdin.write(b"go\n")
            p.stdin.flush()
        for p in procs:
            p.communicate(timeout=harness.EPOCH_TIMEOUT)
            self.assertEqual(p.returncode, 0)
        stats = m.stats()
        for job in specs:
            self.assertEqual(stats["jobs"][job]["delivered"], self.N, job)
        self.assertEqual(stats["renders"] + stats["renders_shared"], 5 * self.N)
        sys.stderr.write("\n[renders] 5 jobs x %d images: %d renders, %d "
                         "shared\n" % (self.N, stats["renders"],
                                        stats["renders_shared"]))
        # 3 per image at best (plain, mirrored, random crop), 5 unshared.
        self.assertLessEqual(stats["renders"], 4 * self.N)
        self.assertEqual(stats["decoded"], self.N)

    def test_a_peer_far_behind_takes_the_leaders_renders(self):
        """Two identical centre-crop jobs, one a whole epoch behind the
        other (its planned queue holds a few picks): the renders the
        leader made are kept for it while it still needs their ids, so
        about one render per image, not two."""
        m = self.mount(self.source, {"ram_cache": "256M", "base": "256"})
        m.mkjob("lead", spec="size=40 seed=1")
        m.mkjob("lag", spec="size=40 seed=2")
        lag = subprocess.Popen([sys.executable, "-c", LAGGING_READER,
                                m.path("jobs", "lag", "next")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.assertEqual(lag.stdout.readline(), b"started\n")
        lead = subprocess.run([sys.executable, "-c", READER, m.path("jobs", "lead", "next")],
                              stdout=subprocess.PIPE, timeout=harness.EPOCH_TIMEOUT)
        self.assertEqual(lead.returncode, 0)
        lag.communicate(b"go\n", timeout=harness.EPOCH_TIMEOUT)
        self.assertEqual(lag.returncode, 0)
        stats = m.stats()
        for job in ("lead", "lag"):
            self.assertEqual(stats["jobs"][job]["delivered"], self.N, job)
        sys.stderr.write("\n[renders] lead and lag x %d images: %d renders, %d shared\n"
                         % (self.N, stats["renders"], stats["renders_shared"]))
        self.assertLessEqual(stats["renders"], self.N * 11 // 10)
        self.assertEqual(stats["decoded"], self.N)

if __name__ == "__main__":
    unittest.main()
