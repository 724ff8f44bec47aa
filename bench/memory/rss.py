#!/usr/bin/python3
"""RSS of the daemon before and after the loads of issue 20 (failures 1 and
2): jobs with many ranks made and removed by a second uid, many 1-byte
readers on one big-size job, six ordinary jobs on generated photos with
ram_cache=64M, and job create/remove churn with a cache_dir.

    scripts/bench.sh memory [--binary build/joaderfs] [--churn-seconds 120]
                        [--only NAME ...]

Prints one line per case: RSS before, at the peak and after (MiB), measured
from /proc/PID/status. Run it as root (it uses setpriv for uid 65534)."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import rss_bytes

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
MIB = 1 << 20


class Peak(threading.Thread):
    """Samples RSS every 20 ms until stop()."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self._done = pid, rss_bytes(pid), threading.Event()
        self.start()

    def run(self):
        while not self._done.wait(0.02):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def stop(self):
        self._done.set()
        self.join()
        return self.peak


def settle(pid, seconds=3.0):
    """RSS once the daemon has had `seconds` to give memory back."""
    time.sleep(seconds)
    return rss_bytes(pid)


def nobody(attack, mnt):
    """Runs one of bench.memory.attacks as uid 65534."""
    r = subprocess.run(NOBODY + [sys.executable, "-m", "bench.memory.attacks", attack, mnt],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("uid 65534's %s failed: %s" % (attack, r.stderr))
    print(r.stdout.strip(), flush=True)  # what the per-user limits refused


def mount(binary, source, workdir, options):
    m = harness.Mount(source, workdir, options, binary=binary)
    m.mount_timeout = 120
    m.start()
    os.chmod(workdir, 0o755)
    return m


def case_attack(binary, source, workdir, attack, options):
    """One of bench.memory.attacks by uid 65534 on a fresh allow_other mount
    with ram_cache=64M: RSS before, at peak and after."""
    m = mount(binary, source, workdir,
              {"allow_other": None, "ram_cache": "64M", "threads": "2", **options})
    try:
        pid = m.proc.pid
        before, peak = settle(pid, 1), Peak(pid)
        nobody(attack, m.mnt)
        return before, peak.stop(), settle(pid)
    finally:
        m.unmount()


def case_ranks(binary, source, tmp):
    """200 jobs with ranks=4096 made by uid 65534, then removed."""
    return case_attack(binary, source, os.path.join(tmp, "ranks"), "ranked-jobs", {})


def case_readers(binary, source, tmp):
    """300 fds on one size=2364 job, each reading 1 byte, then closed."""
    return case_attack(binary, source, os.path.join(tmp, "readers"), "huge-readers",
                       {"size": "2364"})


def case_six_jobs(binary, source, tmp):
    """Six ordinary jobs read one epoch each, together, ram_cache=64M."""
    m = mount(binary, source, os.path.join(tmp, "six"),
              {"ram_cache": "64M", "size": "224", "base": "256"})
    try:
        pid = m.proc.pid
        before, peak = settle(pid, 1), Peak(pid)
        paths = [m.mkjob("j%d" % i) for i in range(6)]
        errors = []

        def read(p):
            try:
                harness.read_to_eof(os.open(p, os.O_RDONLY), timeout=600)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=read, args=(p,)) for p in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        top = peak.stop()
        for i in range(6):
            os.rmdir(m.path("jobs", "j%d" % i))
        return before, top, settle(pid)
    finally:
        m.unmount()


def case_churn(binary, source, tmp, seconds):
    """mkdir + rmdir of a job for `seconds`, with a cache_dir."""
    m = mount(binary, source, os.path.join(tmp, "churn"),
              {"cache_dir": os.path.join(tmp, "churn-cache"),
               "ram_cache": "64M", "log_level": "warn"})
    try:
        pid = m.proc.pid
        before, peak = settle(pid, 1), Peak(pid)
        jobs, n = m.path("jobs"), 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(100):
                p = os.path.join(jobs, "c%d" % n)
                os.mkdir(p)
                os.rmdir(p)
                n += 1
        case_churn.cycles = n
        return before, peak.stop(), settle(pid)
    finally:
        m.unmount()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=harness.BIN)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--churn-seconds", type=float, default=120)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="joaderfs-rss-")
    try:
        source = os.path.join(tmp, "photos")
        gendata = os.path.join(os.path.dirname(args.binary), "joaderfs-gendata")
        subprocess.run([gendata, source, "--images", str(args.images),
                        "--classes", "10", "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        os.chmod(tmp, 0o755)
        cases = [("ranks", lambda: case_ranks(args.binary, source, tmp)),
                 ("readers", lambda: case_readers(args.binary, source, tmp)),
                 ("six_jobs", lambda: case_six_jobs(args.binary, source, tmp)),
                 ("churn", lambda: case_churn(args.binary, source, tmp,
                                              args.churn_seconds))]
        for name, run in cases:
            if args.only and name not in args.only:
                continue
            t0 = time.monotonic()
            before, peak, after = run()
            extra = (" cycles=%d" % case_churn.cycles) if name == "churn" else ""
            print("%-9s RSS before %4d MiB  peak %5d MiB  after %4d MiB  (%.0f s)%s"
                  % (name, before // MIB, peak // MIB, after // MIB,
                     time.monotonic() - t0, extra), flush=True)
    finally:
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
