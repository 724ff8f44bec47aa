"""The loads of issue 20's failure 1, run as another user (uid 65534) by
bench.memory.rss against a mount made with allow_other:

    python3 -m bench.memory.attacks ranked-jobs MOUNT
        200 jobs with ranks=4096, then removes them
    python3 -m bench.memory.attacks huge-readers MOUNT
        300 readers of one size=2364 job, each reading 1 byte, then closes
        them and removes the job
"""
import os
import sys


def ranked_jobs(mnt: str) -> None:
    jobs = os.path.join(mnt, "jobs")
    for i in range(200):
        os.mkdir(os.path.join(jobs, "r%d" % i))
        fd = os.open(os.path.join(jobs, "r%d" % i, "spec"), os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b"ranks=4096")
        os.close(fd)
    for i in range(200):
        os.rmdir(os.path.join(jobs, "r%d" % i))


def huge_readers(mnt: str) -> None:
    job = os.path.join(mnt, "jobs", "big")
    os.mkdir(job)
    fds = [os.open(os.path.join(job, "next"), os.O_RDONLY) for _ in range(300)]
    for fd in fds:
        os.read(fd, 1)
    for fd in fds:
        os.close(fd)
    os.rmdir(job)


ATTACKS = {"ranked-jobs": ranked_jobs, "huge-readers": huge_readers}

if __name__ == "__main__":
    ATTACKS[sys.argv[1]](sys.argv[2])
