"""The users of the soak test (test_soak.py), one process each, run as a
uid of their own through setpriv. Standard library only: the uid running it
may not read the repository's packages, so the test passes this file's text
with `python3 -c`.

    JOADERFS_SOAK_MOUNT=MOUNT python3 -c "$(cat actors.py)" ROLE SEED SECONDS OUT

(The mount comes in the environment: the harness finds its daemon by the
mountpoint on a child's command line.)

Roles:
  epochs  makes a job, opens two readers between epochs and reads them to
          EOF in two threads, and checks the epoch: no id twice, every id
          in the subset, and delivered + skipped (the job's status) = the
          subset; appends a JSON line per epoch to OUT.
  churn   makes and removes jobs as fast as it can, with good and bad specs.
  victims starts readers in child processes and kills them mid-record
          (SIGKILL), stops them (SIGSTOP) for a while before killing them,
          or lets them read slowly.
  sweep   a sweep of SWEEP jobs of centre crops of distinct sizes, each read
          epoch after epoch by a thread of its own at one of several paces,
          a record a read; appends one JSON line per stream at the end: its
          records and its longest wait for one (up to a remount that cuts
          it; the wait for the mount to come back does not count).

Every role waits while the mount is away (the test remounts it with
SIGTERM and kill -9) and goes on when it is back; an epoch cut by a
remount is counted as interrupted, not checked. Exits after SECONDS."""

import errno
import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

HEADER = struct.Struct("<4sIQqIIIIIIQQ")  # docs/design.md 2.4, record v1
REPEAT = 1 << 2  # flags: a lone reader's repeat in place of a skipped sample
SUBSET = 60  # ids 0-59

role, seed, seconds, out = sys.argv[1:5]
mnt = os.environ["JOADERFS_SOAK_MOUNT"]
rng = random.Random(int(seed))
deadline = time.monotonic() + float(seconds)
jobs = os.path.join(mnt, "jobs")
uid = os.getuid()


class Gone(Exception):
    """The mount went away under us (a remount)."""


GONE = (errno.ENOTCONN, errno.EIO, errno.ENODEV, errno.ENOENT, errno.EBADF,
        errno.ECONNABORTED, errno.EINTR)


def report(**fields):
    with open(out, "a") as f:
        f.write(json.dumps(dict(fields, role=role, uid=uid)) + "\n")


def wait_for_mount():
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(mnt, "stats")):
            return True
        time.sleep(0.2)
    return False


def write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def make_job(name, spec):
    """The job, made with `spec` unless it exists (a remount keeps jobs)."""
    path = os.path.join(jobs, name)
    try:
        os.mkdir(path)
    except FileExistsError:
        return path
    write(os.path.join(path, "spec"), spec)
    return path


def read_exact(fd, n):
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def read_records(fd, ids, epochs):
    """Appends each record's id and epoch until EOF."""
    while True:
        head = read_exact(fd, HEADER.size)
        if not head:
            return
        fields = HEADER.unpack(head)
        if fields[0] != b"JSF1" or len(head) != HEADER.size:
            raise AssertionError("bad record header %r" % head[:8])
        payload = fields[10]
        body = read_exact(fd, payload + (-payload % 64))
        if len(body) != payload + (-payload % 64):
            raise AssertionError("stream ends inside a record")
        if not fields[5] & REPEAT:  # a repeat stands in for a skipped sample
            ids.append(fields[2])
        epochs.add(fields[4])


def epochs_role():
    n = 0
    stale = []  # jobs a remount cut short, removed once the mount is back
    while wait_for_mount():
        for path in list(stale):
            try:
                os.rmdir(path)
                stale.remove(path)
            except FileNotFoundError:
                stale.remove(path)
            except OSError:
                pass
        n += 1
        name = "e%d-%d-%d" % (uid, os.getpid(), n)
        job = os.path.join(jobs, name)
        try:
            job = make_job(name, "subset=range:0-%d window=8" % (SUBSET - 1))
            for _ in range(3):
                fds = []
                try:
                    for _ in range(2):
                        fds.append(os.open(os.path.join(job, "next"), os.O_RDONLY))
                except OSError:
                    for fd in fds:
                        os.close(fd)
                    raise
                ids, seen, errors = [], set(), []

                def drain(fd):
                    try:
                        read_records(fd, ids, seen)
                    except OSError as e:
                        errors.append(e)
                    finally:
                        os.close(fd)
                threads = [threading.Thread(target=drain, args=(fd,)) for fd in fds]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if errors:
                    raise errors[0]
                with open(os.path.join(job, "status")) as f:
                    status = json.load(f)
                problems = []
                if len(ids) != len(set(ids)):
                    problems.append("an id twice")
                if not set(ids) <= set(range(SUBSET)):
                    problems.append("an id outside the subset")
                if len(seen) > 1 or (seen and status["epoch"] not in seen):
                    problems.append("records of epochs %s, status says %d"
                                    % (sorted(seen), status["epoch"]))
                if len(ids) + status["skipped"] != SUBSET:
                    problems.append("%d delivered + %d skipped != %d"
                                    % (len(ids), status["skipped"], SUBSET))
                report(epoch=status["epoch"], delivered=len(ids),
                       skipped=status["skipped"], problems=problems)
            os.rmdir(job)
        except OSError as e:
            if e.errno not in GONE and e.errno != errno.EDQUOT:
                raise
            report(interrupted=errno.errorcode[e.errno])
            stale.append(job)
            time.sleep(0.2)


def churn_role():
    made = refused = 0
    while wait_for_mount():
        name = "c%d-%d" % (uid, rng.randrange(40))
        path = os.path.join(jobs, name)
        try:
            if os.path.isdir(path):
                os.rmdir(path)
                continue
            os.mkdir(path)
            made += 1
            spec = rng.choice(["size=32", "ranks=2 subset=range:0-9", "bogus=1",
                               "epochs=-3", "ranks=100000", "subset=range:5-2"])
            try:
                write(os.path.join(path, "spec"), spec)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.EDQUOT):
                    raise
                refused += 1
        except OSError as e:
            if e.errno == errno.EDQUOT or e.errno == errno.EEXIST:
                refused += 1
            elif e.errno not in GONE:
                raise
            else:
                time.sleep(0.2)
    report(made=made, refused=refused)


# A reader killed or stopped mid-record: it reads epoch after epoch, each
# through a stream file of its own (leaking them took uid 4242's 256 readers
# once its epochs ran at 7 ms, and its epochs actor got EMFILE).
VICTIM = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
while True:
    if not os.read(fd, int(sys.argv[2])):
        os.close(fd)
        fd = os.open(sys.argv[1], os.O_RDONLY)
    time.sleep(float(sys.argv[3]))
"""


def victims_role():
    kills = stops = 0
    job = None
    while wait_for_mount():
        try:
            job = make_job("v%d" % uid, "size=48")
            kind = rng.choice(["kill", "stop", "slow"])
            chunk = rng.choice([1, 100, 7000, 1 << 20])
            pause = 0.05 if kind == "slow" else 0.0
            p = subprocess.Popen([sys.executable, "-c", VICTIM,
                                  os.path.join(job, "next"), str(chunk), str(pause)],
                                 stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.1, 1.0))
            if kind == "stop":
                p.send_signal(signal.SIGSTOP)
                stops += 1
                time.sleep(rng.uniform(0.5, 2.0))
            p.kill()
            p.wait()
            kills += 1
        except OSError as e:
            if e.errno not in GONE and e.errno != errno.EDQUOT:
                raise
            time.sleep(0.2)
    report(kills=kills, stops=stops)


SWEEP = 12
PACES = [0.0, 0.005, 0.02, 0.1]


def sweep_role():
    # Sizes 26-48: no delivery above the victims' (the RSS bound's D).
    sizes = [26 + 2 * i for i in range(SWEEP)]
    records = [0] * SWEEP
    longest = [0.0] * SWEEP
    since = [None] * SWEEP  # the start of the wait for a record under way

    def stream(i):
        size = sizes[i]
        record = 64 + (size * size * 3 + 63) // 64 * 64
        while wait_for_mount():
            fd = None
            try:
                job = make_job("w%d-%d" % (uid, i), "size=%d" % size)
                fd = os.open(os.path.join(job, "next"), os.O_RDONLY)
                since[i] = time.monotonic()
                while time.monotonic() < deadline:
                    if not os.read(fd, record):
                        break  # the next epoch through a new reader
                    now = time.monotonic()
                    records[i] += 1
                    longest[i] = max(longest[i], now - since[i])
                    time.sleep(PACES[i % len(PACES)])
                    since[i] = time.monotonic()
            except OSError as e:
                if e.errno not in GONE and e.errno != errno.EDQUOT:
                    raise
                if since[i] is not None:  # the wait a remount cut counts
                    longest[i] = max(longest[i], time.monotonic() - since[i])
                time.sleep(0.2)
            finally:
                since[i] = None
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(SWEEP)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 10)
    now = time.monotonic()
    for i in range(SWEEP):
        waiting = now - since[i] if since[i] is not None and threads[i].is_alive() else 0.0
        report(stream=i, size=sizes[i], pace=PACES[i % len(PACES)], records=records[i],
               longest_wait=round(max(longest[i], waiting), 2))
    os._exit(0)  # a stream still blocked in a read must not hold the exit


{"epochs": epochs_role, "churn": churn_role, "victims": victims_role,
 "sweep": sweep_role}[role]()
