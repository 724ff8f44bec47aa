"""The loads of issue 20's failure 1, run as another user (uid 65534) by
bench.memory.rss against a mount made with allow_other:

    python3 -m bench.memory.attacks ranked-jobs MOUNT
        200 jobs with ranks=4096, then removes them
    python3 -m bench.memory.attacks huge-readers MOUNT
        300 readers of one size=2364 job, each reading 1 byte in a thread
        (those past max_unread_per_user wait), then exits, which closes
        them; the job stays

What the per-user limits refuse (EDQUOT, EMFILE) is counted, not fatal: the
bench measures the daemon under whatever limits its mount has. Each attack
prints what it made and what was refused.
"""
import errno
import os
import sys
import threading
import time

REFUSED = (errno.EDQUOT, errno.EMFILE)


def ranked_jobs(mnt: str) -> None:
    jobs = os.path.join(mnt, "jobs")
    made, refused = [], 0
    for i in range(200):
        job = os.path.join(jobs, "r%d" % i)
        try:
            os.mkdir(job)
        except OSError as e:
            if e.errno not in REFUSED:
                raise
            refused += 1
            continue
        made.append(job)
        fd = os.open(os.path.join(job, "spec"), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, b"ranks=4096")
        except OSError as e:
            if e.errno not in REFUSED:
                raise
            refused += 1
        finally:
            os.close(fd)
    for job in made:
        os.rmdir(job)
    print("ranked-jobs: %d jobs made, %d mkdirs or specs refused" % (len(made), refused))


def huge_readers(mnt: str) -> None:
    job = os.path.join(mnt, "jobs", "big")
    os.mkdir(job)
    fds, refused = [], 0
    for _ in range(300):
        try:
            fds.append(os.open(os.path.join(job, "next"), os.O_RDONLY))
        except OSError as e:
            if e.errno not in REFUSED:
                raise
            refused += 1
    # Each reads a byte in a thread of its own: past max_unread_per_user
    # the uid's reads wait for it to read what it holds.
    returned = []
    for fd in fds:
        threading.Thread(target=lambda fd=fd: returned.append(os.read(fd, 1)),
                         daemon=True).start()
    seen, quiet = -1, 0
    while quiet < 6:  # until no read has returned for 3 s
        time.sleep(0.5)
        quiet, seen = (quiet + 1, seen) if len(returned) == seen else (0, len(returned))
    print("huge-readers: %d readers, %d opens refused, %d reads returned (the "
          "rest wait on max_unread_per_user)" % (len(fds), refused, len(returned)),
          flush=True)
    os._exit(0)  # ends the waiting reads and closes every reader; the job stays


ATTACKS = {"ranked-jobs": ranked_jobs, "huge-readers": huge_readers}

if __name__ == "__main__":
    ATTACKS[sys.argv[1]](sys.argv[2])
