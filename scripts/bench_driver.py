#!/usr/bin/python3
"""Benchmark suite: joaderfs against the PyTorch DataLoader (issue 5).

Runs the JOADER paper's evaluation scenarios (section 5) twice, once with every
job reading through joaderfs (the Python client under a torch DataLoader) and
once with every job using its own DataLoader over torchvision's ImageFolder
(PIL decoding, the same Resize+CenterCrop), and prints Markdown tables.  Jobs
are real processes (scripts/bench_job.py) that consume batches, optionally
sleeping a fixed time per batch to emulate a model's speed.

  S1  one job, cold (joaderfs: cache_dir=none, empty RAM tier)
  S2  one job, two epochs: the second from joaderfs' tiers, decoded again by
      the baseline (the OS page cache holds the JPEGs for both); S2-small does
      the same with a RAM budget of a quarter of the decoded set and a disk tier
  S3  1..6 jobs on the same data at the same speed, started together
  S4  five jobs at speeds 1:2:3:4:5 (per-batch sleeps), each compared with the
      speed it reaches alone through joaderfs
  S5  four jobs starting at 0%, 25%, 50%, 75% of the first job's epoch
  S6  two jobs whose subsets overlap 25%, 50%, 75%, 100%

Usually run through scripts/bench.sh, which builds, makes the dataset and
cleans up; this program mounts and unmounts joaderfs itself, one fresh daemon
per run, and unmounts everything it mounted even when interrupted.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JOB_SCRIPT = HERE / "bench_job.py"
CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
# joaderfs-w0: joaderfs read by a DataLoader with num_workers=0 (the daemon
# already decodes ahead, so worker processes only move bytes).
SYSTEMS = ("joaderfs", "baseline")
ALL_SYSTEMS = ("joaderfs", "joaderfs-w0", "baseline")


def is_jfs(system: str) -> bool:
    return system.startswith("joaderfs")


# --------------------------------------------------------------------------
# Processes: bookkeeping so that nothing outlives the benchmark.

class Reaper:
    """Every process group and mount this program started, for cleanup.

    Pids are also appended to ``pidfile`` so that bench.sh's trap can end
    them if this program itself is killed.
    """

    def __init__(self, pidfile: Path | None) -> None:
        self.pidfile = pidfile
        self.groups: set[int] = set()
        self.mounts: set[str] = set()
        self.lock = threading.Lock()

    def add_group(self, pid: int) -> None:
        with self.lock:
            self.groups.add(pid)
        if self.pidfile:
            with open(self.pidfile, "a") as f:
                f.write(f"{pid}\n")

    def drop_group(self, pid: int) -> None:
        with self.lock:
            self.groups.discard(pid)

    def kill_group(self, pid: int) -> None:
        """SIGTERM then SIGKILL to the process group led by ``pid``."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return
            for _ in range(50):
                if not group_alive(pid):
                    return
                time.sleep(0.1)

    def cleanup(self) -> None:
        for pid in list(self.groups):
            self.kill_group(pid)
        for mnt in list(self.mounts):
            unmount(mnt, lazy_fallback=True)
        self.groups.clear()
        self.mounts.clear()


def stat_fields(pid: int | str) -> list[bytes]:
    """Fields of /proc/PID/stat after the command name (field 3 onward: state
    is [0], ppid [1], pgrp [2], minflt [7], utime [11], stime [12])."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2:].split()


def all_stat_fields():
    """(pid, stat_fields) of every process still there when read."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            yield int(name), stat_fields(name)
        except OSError:
            continue


def group_alive(pgid: int) -> bool:
    return any(int(fields[2]) == pgid and fields[0] != b"Z" for _, fields in all_stat_fields())


def is_mounted(mnt: str) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def unmount(mnt: str, lazy_fallback: bool = False) -> None:
    if not is_mounted(mnt):
        return
    r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
    if r.returncode != 0 and lazy_fallback:
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)


def proc_cpu(pid: int) -> float:
    """utime+stime of a live process (all its threads), in seconds."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def ppid_table() -> dict[int, int]:
    return {pid: int(fields[1]) for pid, fields in all_stat_fields()}


class MemoryMonitor(threading.Thread):
    """Samples VmHWM of every process in the trees of the jobs.

    ``peak_kib`` is the largest sum, over one sampling instant, of the VmHWM
    of the processes then alive in the jobs' trees (each job process and its
    DataLoader workers).  VmHWM counts pages shared after fork (the torch
    libraries) once per process, so the figure is an upper bound.
    """

    def __init__(self, interval: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.roots: set[int] = set()
        self.hwm: dict[int, int] = {}
        self.peak_kib = 0
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def add_root(self, pid: int) -> None:
        with self.lock:
            self.roots.add(pid)

    def sample(self) -> None:
        table = ppid_table()
        children: dict[int, list[int]] = {}
        for pid, ppid in table.items():
            children.setdefault(ppid, []).append(pid)
        with self.lock:
            todo = [r for r in self.roots if r in table]
        alive = []
        while todo:
            pid = todo.pop()
            alive.append(pid)
            todo += children.get(pid, [])
        total = 0
        for pid in alive:
            kib = proc_status_kib(pid, "VmHWM")
            if kib is None:
                kib = self.hwm.get(pid, 0)
            self.hwm[pid] = max(self.hwm.get(pid, 0), kib)
            total += self.hwm[pid]
        self.peak_kib = max(self.peak_kib, total)

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


# --------------------------------------------------------------------------
# The daemon.

class Daemon:
    """A joaderfs daemon in the foreground (-f), in its own process group."""

    def __init__(self, args, reaper: Reaper, workdir: Path, name: str,
                 options: str) -> None:
        self.reaper = reaper
        self.mnt = str(workdir / f"mnt-{name}")
        os.makedirs(self.mnt, exist_ok=True)
        self.log_path = workdir / f"daemon-{name}.log"
        self.options = options
        self.cmd = [args.joaderfs, args.data, self.mnt, "-f", "-o",
                    f"{options},log={self.log_path}"]
        self.stderr = open(workdir / f"daemon-{name}.stderr", "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.stderr,
                                     stderr=self.stderr,
                                     start_new_session=True)
        reaper.add_group(self.proc.pid)
        reaper.mounts.add(self.mnt)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.mnt, "stats")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"joaderfs did not mount: {' '.join(self.cmd)}; "
                                   f"log: {self.log_tail()}")
            time.sleep(0.05)

    def stats(self) -> dict[str, Any]:
        with open(os.path.join(self.mnt, "stats"), "rb") as f:
            return json.loads(f.read())

    def cpu(self) -> float:
        return proc_cpu(self.proc.pid)

    def hwm_kib(self) -> int:
        return proc_status_kib(self.proc.pid, "VmHWM") or 0

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text().splitlines()
        except OSError:
            text = []
        try:
            text += Path(self.stderr.name).read_text().splitlines()
        except OSError:
            pass
        return "\n".join(text[-lines:])

    def log_problems(self) -> list[str]:
        try:
            text = self.log_path.read_text().splitlines()
        except OSError:
            return []
        return [line for line in text
                if "[warning]" in line or "[error]" in line or "[critical]" in line]

    def stop(self) -> None:
        unmount(self.mnt)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.reaper.kill_group(self.proc.pid)
            self.proc.wait()
        unmount(self.mnt, lazy_fallback=True)
        self.reaper.drop_group(self.proc.pid)
        self.reaper.mounts.discard(self.mnt)
        self.stderr.close()


# --------------------------------------------------------------------------
# Runs.

@dataclass
class JobPlan:
    name: str
    epochs: int = 1
    delay: float = 0.0            # seconds per batch
    range: tuple[int, int] | None = None  # inclusive ids; None = all
    start_after: tuple[int, float] | None = None  # (job index, fraction of its epoch)


@dataclass
class RunResult:
    scenario: str
    case: str
    system: str
    rep: int
    jobs: list[dict[str, Any]] = field(default_factory=list)
    makespan: float = 0.0
    samples: int = 0
    distinct: int = 0             # |union of subsets|
    cpu_jobs: float = 0.0
    cpu_daemon: float = 0.0
    decodes: int = 0
    delivered: int = 0
    daemon_hwm_kib: int = 0
    jobs_hwm_kib: int = 0
    errors: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    wall: float = 0.0

    @property
    def aggregate(self) -> float:
        return self.samples / self.makespan if self.makespan else 0.0

    @property
    def cpu_ms_per_sample(self) -> float:
        return 1000 * (self.cpu_jobs + self.cpu_daemon) / max(1, self.samples)

    @property
    def cores_used(self) -> float:
        """CPU seconds of the daemon and jobs per second of the run."""
        return (self.cpu_jobs + self.cpu_daemon) / self.makespan if self.makespan else 0.0

    @property
    def decodes_per_delivered(self) -> float:
        return self.decodes / max(1, self.samples)

    @property
    def decodes_per_distinct(self) -> float:
        return self.decodes / max(1, self.distinct)

    def job_rates(self) -> list[float]:
        """Each job's samples/s over all its epochs."""
        return [sum(e["samples"] for e in j["epochs"]) /
                max(1e-9, sum(e["seconds"] for e in j["epochs"]))
                for j in self.jobs]

    def steady_rates(self) -> list[float]:
        """Each job's samples/s after its first batch of each epoch, which
        leaves out the DataLoader's start-up (forking workers, filling the
        prefetch queue): on short epochs that start-up is a large share."""
        rates = []
        for j in self.jobs:
            n = sum(e["samples"] - e["first_batch_samples"] for e in j["epochs"])
            t = sum(e["seconds"] - (e["first_batch_s"] or 0) for e in j["epochs"])
            rates.append(n / max(1e-9, t))
        return rates

    def epoch_rates(self, job: int = 0) -> list[float]:
        return [e["samples"] / max(1e-9, e["seconds"])
                for e in self.jobs[job]["epochs"]]

    def job_times(self) -> list[float]:
        return [sum(e["seconds"] for e in j["epochs"]) for j in self.jobs]


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        self.workdir = Path(tempfile.mkdtemp(prefix="run-", dir=args.workdir))
        self.reaper = Reaper(Path(args.pidfile) if args.pidfile else None)
        self.results: list[RunResult] = []
        self.run_counter = 0
        self.dataset_size = 0

    # -- one run ----------------------------------------------------------
    def run(self, scenario: str, case: str, system: str, rep: int,
            plans: list[JobPlan], mount_options: str = "",
            cache_dir: bool = False) -> RunResult:
        args = self.args
        self.run_counter += 1
        tag = f"{self.run_counter:03d}-{scenario}-{case}-{system}-{rep}".replace(
            " ", "_").replace("/", "_").replace("%", "pct")
        result = RunResult(scenario, case, system, rep)
        union: set[int] = set()
        for plan in plans:
            lo, hi = plan.range or (0, self.dataset_size - 1)
            union.update(range(lo, hi + 1))
        result.distinct = len(union)
        started = time.monotonic()
        daemon = None
        cache_path = None
        procs: list[subprocess.Popen] = []
        monitor = MemoryMonitor()
        try:
            if is_jfs(system):
                opts = [f"ram_cache={args.ram_cache}", f"seed={args.seed}",
                        f"size={args.size}"]
                if cache_dir:
                    cache_path = self.workdir / f"cache-{tag}"
                    cache_path.mkdir()
                    opts.append(f"cache_dir={cache_path}")
                else:
                    opts.append("cache_dir=none")
                if mount_options:
                    opts.append(mount_options)
                daemon = Daemon(args, self.reaper, self.workdir, tag, ",".join(opts))
            env = dict(os.environ, PYTHONPATH=str(HERE))
            for i, plan in enumerate(plans):
                cmd = [sys.executable, str(JOB_SCRIPT), "--system",
                       "joaderfs" if is_jfs(system) else "baseline",
                       "--epochs", str(plan.epochs), "--batch", str(args.batch),
                       "--workers", str(args.workers if system == "baseline" else
                                        0 if system == "joaderfs-w0" else args.jfs_workers),
                       "--delay", f"{plan.delay:.6f}",
                       "--size", str(args.size), "--seed", str(args.seed + i),
                       "--progress", str(self.workdir / f"progress-{tag}-{i}"),
                       "--result", str(self.workdir / f"result-{tag}-{i}.json")]
                if is_jfs(system):
                    cmd += ["--job-dir", os.path.join(daemon.mnt, "jobs", plan.name)]
                    if plan.range:
                        cmd += ["--spec", f"subset=range:{plan.range[0]}-{plan.range[1]}"]
                else:
                    cmd += ["--data", args.data]
                    if plan.range:
                        ids = self.workdir / f"ids-{plan.range[0]}-{plan.range[1]}"
                        if not ids.exists():
                            ids.write_text("".join(
                                f"{k}\n" for k in range(plan.range[0], plan.range[1] + 1)))
                        cmd += ["--ids-file", str(ids)]
                err = open(self.workdir / f"job-{tag}-{i}.stderr", "w")
                p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=err, env=env, text=True,
                                     start_new_session=True)
                err.close()
                self.reaper.add_group(p.pid)
                procs.append(p)
            for i, p in enumerate(procs):
                line = read_line(p, 180)
                if line != "ready":
                    raise RuntimeError(f"job {i} did not get ready (said {line!r}); "
                                       f"stderr: {self.job_stderr(tag, i)}")
            monitor.start()
            for p in procs:
                monitor.add_root(p.pid)
            stats0 = daemon.stats() if daemon else {}
            cpu0 = daemon.cpu() if daemon else 0.0
            go_sent = [False] * len(procs)
            progress = [0] * len(procs)
            last_change = time.monotonic()
            deadline = time.monotonic() + args.run_timeout
            outputs: dict[int, str] = {}
            while len(outputs) < len(procs):
                for i, plan in enumerate(plans):
                    if go_sent[i]:
                        continue
                    cond = plan.start_after
                    if cond is None or progress[cond[0]] >= cond[1] * self.subset_size(plans[cond[0]]):
                        procs[i].stdin.write("go\n")
                        procs[i].stdin.flush()
                        go_sent[i] = True
                        last_change = time.monotonic()
                time.sleep(0.02)
                for i, p in enumerate(procs):
                    n = read_progress(self.workdir / f"progress-{tag}-{i}")
                    if n != progress[i]:
                        progress[i] = n
                        last_change = time.monotonic()
                    if i not in outputs and p.poll() is not None:
                        try:
                            out = (self.workdir / f"result-{tag}-{i}.json").read_text()
                        except OSError:
                            out = ""
                        if p.returncode != 0 or not out:
                            raise RuntimeError(
                                f"job {i} exited with status {p.returncode}; stderr: "
                                f"{self.job_stderr(tag, i)}")
                        outputs[i] = out
                        last_change = time.monotonic()
                now = time.monotonic()
                if now > deadline or now - last_change > args.stall_timeout:
                    what = "timed out" if now > deadline else \
                        f"made no progress for {args.stall_timeout:.0f} s"
                    detail = f"progress {progress} of {[self.subset_size(p) * p.epochs for p in plans]}"
                    if daemon:
                        try:
                            detail += f"; /stats: {json.dumps(daemon.stats())}"
                        except OSError as e:
                            detail += f"; /stats unreadable: {e}"
                        detail += f"; daemon log tail:\n{daemon.log_tail()}"
                    raise RuntimeError(f"run {tag} {what}; {detail}")
            monitor.stop()
            result.jobs = [json.loads(outputs[i]) for i in range(len(procs))]
            if daemon:
                result.cpu_daemon = daemon.cpu() - cpu0
                stats1 = daemon.stats()
                result.stats = stats1
                result.decodes = stats1["decoded"] - stats0["decoded"]
                result.delivered = stats1["delivered"] - stats0["delivered"]
                result.daemon_hwm_kib = daemon.hwm_kib()
                for problem in daemon.log_problems():
                    result.errors.append(f"daemon log: {problem}")
                if stats1.get("skipped"):
                    result.errors.append(f"/stats skipped={stats1['skipped']}")
            else:
                result.decodes = sum(j["decodes"] for j in result.jobs)
            result.cpu_jobs = sum(j["cpu_s"] for j in result.jobs)
            result.samples = sum(e["samples"] for j in result.jobs for e in j["epochs"])
            if daemon and result.delivered != result.samples:
                result.errors.append(f"/stats delivered {result.delivered} but jobs "
                                     f"consumed {result.samples}")
            result.makespan = (max(j["end"] for j in result.jobs) -
                               min(j["go"] for j in result.jobs))
            result.jobs_hwm_kib = monitor.peak_kib
            for i, j in enumerate(result.jobs):
                for e in j["epochs"]:
                    bad = {k: e.get(k) for k in ("missing", "unexpected", "duplicates")
                           if e.get(k)}
                    if not e["shape_ok"]:
                        bad["shape"] = "wrong"
                    if e["samples"] != j["subset_size"]:
                        bad["samples"] = f"{e['samples']} of {j['subset_size']}"
                    if bad:
                        result.errors.append(f"job {i} epoch {e['epoch']}: {bad}")
        except Exception as e:  # noqa: BLE001 - recorded, and the suite goes on
            result.errors.append(f"FAILED: {e}")
            print(f"  !! {tag}: {e}", file=sys.stderr, flush=True)
        finally:
            if monitor.is_alive():
                monitor.stop()
            for p in procs:
                if p.poll() is None:
                    self.reaper.kill_group(p.pid)
                p.wait()
                for stream in (p.stdin, p.stdout):
                    try:
                        stream.close()
                    except OSError:
                        pass
                self.reaper.drop_group(p.pid)
            if daemon:
                daemon.stop()
            if cache_path:
                subprocess.run(["rm", "-rf", str(cache_path)], check=False)
            for i in range(len(procs)):
                for name in (f"progress-{tag}-{i}", f"result-{tag}-{i}.json"):
                    try:
                        os.unlink(self.workdir / name)
                    except OSError:
                        pass
        result.wall = time.monotonic() - started
        self.results.append(result)
        rates = ", ".join(f"{r:.0f}" for r in result.job_rates()) if result.jobs else "-"
        print(f"  {scenario:3s} {case:10s} {system:11s} rep {rep}: jobs {rates} samples/s, "
              f"aggregate {result.aggregate:.0f}/s, {result.cpu_ms_per_sample:.1f} CPU ms/sample, "
              f"{result.cores_used:.2f} cores, "
              f"{result.decodes_per_delivered:.2f} decodes/sample "
              f"({result.wall:.0f} s){' ERRORS' if result.errors else ''}", flush=True)
        for err in result.errors[:5]:
            print(f"      {err}", flush=True)
        return result

    def subset_size(self, plan: JobPlan) -> int:
        if plan.range:
            return plan.range[1] - plan.range[0] + 1
        return self.dataset_size

    def job_stderr(self, tag: str, i: int) -> str:
        try:
            text = (self.workdir / f"job-{tag}-{i}.stderr").read_text()
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-10:])

    def pair(self, scenario: str, case: str, plans: list[JobPlan], reps: int,
             systems=SYSTEMS, **kw) -> None:
        """Runs the case on each system, reps times, alternating the order."""
        for rep in range(reps):
            order = list(systems) if rep % 2 == 0 else list(reversed(systems))
            for system in order:
                self.run(scenario, case, system, rep, plans, **kw)


def read_line(p: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    if not ready:
        return ""
    return p.stdout.readline().strip()


def read_progress(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            text = f.read().strip()
        return int(text) if text else 0
    except (OSError, ValueError):
        return 0


# --------------------------------------------------------------------------
# Component costs: where the CPU of one sample goes.

PIL_COST = r"""
import glob, os, resource, sys
from torchvision import transforms as T
from torchvision.datasets.folder import pil_loader
root, size, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = sorted(glob.glob(os.path.join(root, "*", "*")))[:limit]
tf = T.Compose([T.Resize(size), T.CenterCrop(size), T.PILToTensor()])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_minflt
for f in files[:20]:
    tf(pil_loader(f))
c0, f0 = cpu()
for f in files:
    tf(pil_loader(f))
c1, f1 = cpu()
print(1000 * (c1 - c0) / len(files), (f1 - f0) / len(files))
"""


def proc_minflt(pid: int) -> int:
    return int(stat_fields(pid)[7])


def read_epoch_raw(job: str) -> tuple[int, float]:
    """Reads one epoch of ``job`` with 1 MiB reads; returns (bytes, CPU s of this thread)."""
    buf = bytearray(1 << 20)
    total = 0
    c0 = time.thread_time()
    with open(os.path.join(job, "next"), "rb", buffering=0) as f:
        while (n := f.readinto(buf)):
            total += n
    return total, time.thread_time() - c0


def measure_costs(bench: "Bench") -> dict[str, float]:
    """CPU per image of PIL and of the daemon's decoder, and per sample of
    serving RAM hits, raw and through a DataLoader with and without workers."""
    a = bench.args
    out: dict[str, float] = {}
    limit = min(bench.dataset_size, 500)
    r = subprocess.run([sys.executable, "-c", PIL_COST, a.data, str(a.size), str(limit)],
                       capture_output=True, text=True, timeout=900)
    if r.returncode == 0:
        pil_ms, pil_faults = r.stdout.split()
        out["pil_ms"], out["pil_faults"] = float(pil_ms), float(pil_faults)
    else:
        print(f"  PIL cost failed: {r.stderr[-500:]}", file=sys.stderr)
    d = Daemon(a, bench.reaper, bench.workdir, "costs",
               f"ram_cache={a.ram_cache},seed={a.seed},size={a.size},cache_dir=none")
    try:
        job = os.path.join(d.mnt, "jobs", "raw")
        os.mkdir(job)
        s0, c0, f0 = d.stats(), d.cpu(), proc_minflt(d.proc.pid)
        read_epoch_raw(job)
        s1, c1, f1 = d.stats(), d.cpu(), proc_minflt(d.proc.pid)
        decoded = max(1, s1["decoded"] - s0["decoded"])
        out["decode_ms"] = 1000 * (c1 - c0) / decoded
        out["decode_faults"] = (f1 - f0) / decoded
        out["decode_busy_ms"] = 1000 * (s1["decode_busy_seconds"] -
                                        s0["decode_busy_seconds"]) / decoded
        _, reader = read_epoch_raw(job)
        s2, c2 = d.stats(), d.cpu()
        hits = max(1, s2["delivered"] - s1["delivered"])
        out["hit_daemon_ms"] = 1000 * (c2 - c1) / hits
        out["hit_reader_ms"] = 1000 * reader / hits
        env = dict(os.environ, PYTHONPATH=str(HERE))
        for workers in sorted({0, a.jfs_workers}):
            result = bench.workdir / f"costs-client-{workers}.json"
            cmd = [sys.executable, str(JOB_SCRIPT), "--system", "joaderfs",
                   "--job-dir", os.path.join(d.mnt, "jobs", f"client-w{workers}"),
                   "--batch", str(a.batch), "--workers", str(workers),
                   "--size", str(a.size), "--result", str(result)]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=env, text=True, start_new_session=True)
            bench.reaper.add_group(p.pid)
            try:
                if read_line(p, 180) != "ready":
                    raise RuntimeError("cost job did not get ready")
                s3, c3 = d.stats(), d.cpu()
                p.stdin.write("go\n")
                p.stdin.flush()
                p.wait(timeout=a.run_timeout)
                s4, c4 = d.stats(), d.cpu()
                res = json.loads(result.read_text())
                n = max(1, sum(e["samples"] for e in res["epochs"]))
                out[f"client_w{workers}_ms"] = 1000 * res["cpu_s"] / n
                out[f"client_w{workers}_daemon_ms"] = 1000 * (c4 - c3) / n
                out[f"client_w{workers}_decodes"] = s4["decoded"] - s3["decoded"]
                out[f"client_w{workers}_rate"] = n / sum(e["seconds"] for e in res["epochs"])
            finally:
                if p.poll() is None:
                    bench.reaper.kill_group(p.pid)
                p.wait()
                bench.reaper.drop_group(p.pid)
                for stream in (p.stdin, p.stdout):
                    stream.close()
    finally:
        d.stop()
    return out


def costs_table(c: dict[str, float], args) -> str:
    if not c:
        return ""
    lines = ["| what | CPU ms per image or sample | note |", "| --- | ---: | --- |"]

    def add(what, key, note=""):
        if key in c:
            lines.append(f"| {what} | {c[key]:.2f} | {note} |")
    add("PIL open+decode, Resize+CenterCrop, PILToTensor (one process)", "pil_ms",
        f"{c.get('pil_faults', 0):.0f} page faults per image")
    add("joaderfs daemon, one decode, read with 1 MiB reads", "decode_ms",
        f"{c.get('decode_faults', 0):.0f} page faults per decode; decode-pool busy "
        f"{c.get('decode_busy_ms', 0):.1f} ms wall")
    add("joaderfs daemon, one RAM hit", "hit_daemon_ms")
    add("reader of a RAM hit, 1 MiB reads (no DataLoader)", "hit_reader_ms")
    for w in sorted({0, args.jfs_workers}):
        add(f"job reading RAM hits through JobDataset + DataLoader, num_workers={w} "
            f"(incl. its workers)", f"client_w{w}_ms",
            f"{c.get(f'client_w{w}_rate', 0):.0f} samples/s; daemon "
            f"{c.get(f'client_w{w}_daemon_ms', 0):.2f} ms/sample; "
            f"{c.get(f'client_w{w}_decodes', 0):.0f} decodes")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Scenarios.

def scenarios(bench: Bench, which: set[str]) -> None:
    a = bench.args
    n = bench.dataset_size
    reps = a.reps
    both = ALL_SYSTEMS if a.w0 else SYSTEMS
    if "C" in which:
        print("C: component costs", flush=True)
        try:
            bench.costs = measure_costs(bench)
        except Exception as e:  # noqa: BLE001 - reported; the scenarios go on
            print(f"  !! component costs failed: {e}", file=sys.stderr, flush=True)
        for key, value in bench.costs.items():
            print(f"  {key}: {value:.3f}", flush=True)
    if "S1" in which:
        print("S1: one job, cold", flush=True)
        bench.pair("S1", "1 job", [JobPlan("s1")], reps, systems=both)
    if "S2" in which:
        print("S2: one job, second epoch", flush=True)
        bench.pair("S2", "2 epochs", [JobPlan("s2", epochs=2)], reps,
                   systems=both, cache_dir=True)
        # Same, but the RAM tier holds a quarter of the decoded set: the rest
        # of the second epoch comes from the disk tier (or is decoded again).
        small = max(1, n * a.size * a.size * 3 // 4 // MIB)
        bench.pair("S2", "RAM 1/4", [JobPlan("s2", epochs=2)], a.reps_other,
                   systems=("joaderfs",), cache_dir=True,
                   mount_options=f"ram_cache={small}M")
    if "S3" in which:
        print("S3: 1..6 jobs on the same data at the same speed", flush=True)
        for k in a.s3_jobs:
            plans = [JobPlan(f"s3-{i}") for i in range(k)]
            case = f"{k} job" + ("s" if k > 1 else "")
            if k == 4:
                # The target case: repeated; the num_workers=0 variant once.
                bench.pair("S3", case, plans, reps)
                if a.w0:
                    bench.pair("S3", case, plans, a.reps_other, systems=("joaderfs-w0",))
            else:
                bench.pair("S3", case, plans, a.reps_other, systems=both)
    if "S4" in which:
        print("S4: five jobs at speeds 1:2:3:4:5", flush=True)
        m = min(n, a.s4_samples)
        rate5 = a.s4_rate
        if rate5 <= 0:
            s1 = [r.job_rates()[0] for r in bench.results
                  if r.scenario == "S1" and r.system == "joaderfs" and r.jobs]
            rate5 = min(150.0, 0.75 * statistics.median(s1)) if s1 else 100.0
        rate1 = rate5 / 5
        bench.s4_rates = [rate1 * k for k in range(1, 6)]
        plans = [JobPlan(f"s4-speed{k}", delay=a.batch / (rate1 * k),
                         range=(0, m - 1)) for k in range(1, 6)]
        print(f"  target speeds {', '.join(f'{r:.0f}' for r in bench.s4_rates)} samples/s "
              f"(per-batch sleeps {', '.join(f'{p.delay:.3f}' for p in plans)} s), "
              f"{m} samples", flush=True)
        for rep in range(a.reps_other):
            for k, plan in enumerate(plans):
                bench.run("S4", f"alone {k + 1}", "joaderfs", rep, [plan])
        bench.pair("S4", "5 speeds", plans, a.reps_other)
    if "S5" in which:
        print("S5: four jobs starting at 0%, 25%, 50%, 75% of the first job's epoch",
              flush=True)
        plans = [JobPlan("s5-0")] + [JobPlan(f"s5-{k}", start_after=(0, k / 4))
                                     for k in range(1, 4)]
        bench.pair("S5", "staggered", plans, a.reps_other)
    if "S6" in which:
        print("S6: two jobs with overlapping subsets", flush=True)
        m = n // 2
        for pct in a.s6_overlaps:
            lo2 = m - m * pct // 100
            plans = [JobPlan("s6-a", range=(0, m - 1)),
                     JobPlan("s6-b", range=(lo2, lo2 + m - 1))]
            bench.pair("S6", f"{pct}% overlap", plans, a.reps_other)


# --------------------------------------------------------------------------
# Reporting.

def med(values: list[float]) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def runs_of(bench: Bench, scenario: str, case: str, system: str) -> list[RunResult]:
    return [r for r in bench.results if r.scenario == scenario and r.case == case
            and r.system == system and r.jobs and not any(
                e.startswith("FAILED") for e in r.errors)]


def paired_ratio(bench, scenario, case, metric, num="joaderfs", den="baseline",
                 den_case=None) -> float:
    a = runs_of(bench, scenario, case, num)
    b = runs_of(bench, scenario, den_case or case, den)
    ratios = []
    for ra in a:
        mb = [rb for rb in b if rb.rep == ra.rep] or b
        if mb:
            ratios.append(metric(ra) / max(1e-9, metric(mb[0])))
    return med(ratios)


def fmt_list(values: list[float], digits: int = 0) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


def cases_in_order(bench: Bench) -> list[tuple[str, str]]:
    seen = []
    for r in bench.results:
        if (r.scenario, r.case) not in seen:
            seen.append((r.scenario, r.case))
    return seen


def results_table(bench: Bench) -> str:
    lines = ["| scenario | case | system | runs | each job's samples/s | each job's epoch s "
             "| aggregate samples/s | CPU ms / sample | cores used | decodes / delivered "
             "| decodes / distinct | daemon peak MiB | jobs peak MiB |",
             "| --- | --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for scenario, case in cases_in_order(bench):
        for system in ALL_SYSTEMS:
            runs = runs_of(bench, scenario, case, system)
            failed = [r for r in bench.results if r.scenario == scenario and
                      r.case == case and r.system == system and r not in runs]
            if not runs and not failed:
                continue
            if not runs:
                lines.append(f"| {scenario} | {case} | {system} | 0 | failed: see below | "
                             "| | | | | | | |")
                continue
            if scenario == "S2":
                # Per epoch of the one job.
                rates = [med([r.epoch_rates()[e] for r in runs]) for e in range(
                    len(runs[0].jobs[0]["epochs"]))]
                times = [med([r.jobs[0]["epochs"][e]["seconds"] for r in runs])
                         for e in range(len(runs[0].jobs[0]["epochs"]))]
                rate_s = "epochs: " + fmt_list(rates)
                time_s = "epochs: " + fmt_list(times, 1)
            else:
                njobs = len(runs[0].jobs)
                rate_s = fmt_list([med([r.job_rates()[j] for r in runs]) for j in range(njobs)])
                time_s = fmt_list([med([r.job_times()[j] for r in runs]) for j in range(njobs)], 1)
            daemon = (f"{med([r.daemon_hwm_kib for r in runs]) / 1024:.0f}"
                      if is_jfs(system) else "-")
            n_fail = f" ({len(failed)} failed)" if failed else ""
            lines.append(
                f"| {scenario} | {case} | {system} | {len(runs)}{n_fail} | {rate_s} | {time_s} | "
                f"{med([r.aggregate for r in runs]):.0f} | "
                f"{med([r.cpu_ms_per_sample for r in runs]):.1f} | "
                f"{med([r.cores_used for r in runs]):.2f} | "
                f"{med([r.decodes_per_delivered for r in runs]):.3f} | "
                f"{med([r.decodes_per_distinct for r in runs]):.3f} | {daemon} | "
                f"{med([r.jobs_hwm_kib for r in runs]) / 1024:.0f} |")
    return "\n".join(lines)


def targets(bench: Bench) -> tuple[str, list[dict[str, Any]]]:
    rows = []

    def add(name, value, goal, ok, note=""):
        rows.append({"target": name, "measured": value, "goal": goal,
                     "met": "yes" if ok else ("n/a" if ok is None else "**no**"),
                     "note": note})

    have = {(s, c) for s, c in cases_in_order(bench)}
    variants = [("joaderfs", "")]
    if any(r.system == "joaderfs-w0" for r in bench.results):
        variants.append(("joaderfs-w0", " [variant: num_workers=0]"))
    for system, label in variants:
        if ("S1", "1 job") in have:
            r = paired_ratio(bench, "S1", "1 job", lambda x: x.job_rates()[0], num=system)
            add(f"S1 one job cold: samples/s vs baseline{label}", f"{r:.2f}x", ">= 1.0x",
                r >= 1.0)
    for system, label in variants:
        if ("S2", "2 epochs") in have:
            r = paired_ratio(bench, "S2", "2 epochs", lambda x: x.epoch_rates()[1], num=system)
            add(f"S2 second epoch: samples/s vs baseline{label}", f"{r:.1f}x", ">= 5x",
                r >= 5.0)
    if ("S2", "2 epochs") in have:
        if ("S2", "RAM 1/4") in have:
            r2 = paired_ratio(bench, "S2", "RAM 1/4", lambda x: x.epoch_rates()[1],
                              den_case="2 epochs")
            add("S2 second epoch, RAM tier 1/4 of the set + disk tier, vs baseline",
                f"{r2:.1f}x", "(no target)", None)
    case = "4 jobs"
    for system, label in variants:
        if ("S3", case) in have:
            r = paired_ratio(bench, "S3", case, lambda x: x.aggregate, num=system)
            add(f"S3 {case}: aggregate samples/s vs baseline{label}", f"{r:.2f}x", ">= 3.5x",
                r >= 3.5)
            d = med([x.decodes_per_distinct for x in runs_of(bench, "S3", case, system)])
            add(f"S3 {case}: joaderfs decodes per distinct sample{label}", f"{d:.3f}",
                "<= 1.05", d <= 1.05)
    if ("S4", "5 speeds") in have:
        alone = [med([x.job_rates()[0] for x in runs_of(bench, "S4", f"alone {k}", "joaderfs")])
                 for k in range(1, 6)]
        alone_steady = [med([x.steady_rates()[0] for x in
                             runs_of(bench, "S4", f"alone {k}", "joaderfs")])
                        for k in range(1, 6)]
        for system in SYSTEMS:
            runs = runs_of(bench, "S4", "5 speeds", system)
            if not runs:
                continue
            rates = [med([x.job_rates()[k] for x in runs]) for k in range(5)]
            fr = [r / a for r, a in zip(rates, alone)]
            add(f"S4 {system}: each job's speed / its speed alone through joaderfs "
                f"(speeds 1..5), whole epoch", " / ".join(f"{100 * f:.0f}%" for f in fr),
                ">= 90% each" if system == "joaderfs" else "(reference)",
                min(fr) >= 0.9 if system == "joaderfs" else None,
                "alone: " + fmt_list(alone) + " samples/s")
            steady = [med([x.steady_rates()[k] for x in runs]) for k in range(5)]
            fs = [r / a for r, a in zip(steady, alone_steady)]
            add(f"S4 {system}: the same after each job's first batch (steady state)",
                " / ".join(f"{100 * f:.0f}%" for f in fs),
                ">= 90% each" if system == "joaderfs" else "(reference)",
                min(fs) >= 0.9 if system == "joaderfs" else None,
                "alone: " + fmt_list(alone_steady) + " samples/s")
    if ("S5", "staggered") in have:
        r = paired_ratio(bench, "S5", "staggered", lambda x: x.makespan, num="baseline",
                         den="joaderfs")
        c = paired_ratio(bench, "S5", "staggered", lambda x: x.cpu_ms_per_sample,
                         num="baseline", den="joaderfs")
        add("S5 staggered: baseline / joaderfs makespan, CPU per sample",
            f"{r:.2f}x, {c:.2f}x", "(no target)", None)
    for pct in bench.args.s6_overlaps:
        case = f"{pct}% overlap"
        if ("S6", case) in have:
            d = med([x.decodes_per_distinct for x in runs_of(bench, "S6", case, "joaderfs")])
            add(f"S6 {case}: joaderfs decodes / \\|D1 u D2\\|", f"{d:.3f}", "within 5%",
                abs(d - 1) <= 0.05)
    lines = ["| target | measured | goal | met | note |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['target']} | {row['measured']} | {row['goal']} | "
                     f"{row['met']} | {row['note']} |")
    return "\n".join(lines), rows


def write_csv(bench: Bench, out: Path) -> None:
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "case", "system", "rep", "jobs", "samples", "distinct",
                    "makespan_s", "aggregate_sps", "cpu_jobs_s", "cpu_daemon_s",
                    "cpu_ms_per_sample", "cores_used", "decodes", "decodes_per_delivered",
                    "decodes_per_distinct", "daemon_peak_mib", "jobs_peak_mib",
                    "ram_hits", "disk_hits", "wall_s", "errors"])
        for r in bench.results:
            w.writerow([r.scenario, r.case, r.system, r.rep, len(r.jobs), r.samples,
                        r.distinct, f"{r.makespan:.3f}", f"{r.aggregate:.1f}",
                        f"{r.cpu_jobs:.2f}", f"{r.cpu_daemon:.2f}",
                        f"{r.cpu_ms_per_sample:.2f}", f"{r.cores_used:.3f}", r.decodes,
                        f"{r.decodes_per_delivered:.4f}", f"{r.decodes_per_distinct:.4f}",
                        f"{r.daemon_hwm_kib / 1024:.0f}" if is_jfs(r.system) else "",
                        f"{r.jobs_hwm_kib / 1024:.0f}", r.stats.get("ram_hits", ""),
                        r.stats.get("disk_hits", ""), f"{r.wall:.1f}",
                        " | ".join(r.errors)])
    with open(out / "jobs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "case", "system", "rep", "job", "delay_s", "epoch",
                    "samples", "seconds", "samples_per_s", "first_batch_s", "cpu_s"])
        for r in bench.results:
            for i, j in enumerate(r.jobs):
                for e in j["epochs"]:
                    w.writerow([r.scenario, r.case, r.system, r.rep, i, j["delay"],
                                e["epoch"], e["samples"], f"{e['seconds']:.3f}",
                                f"{e['samples'] / max(1e-9, e['seconds']):.1f}",
                                f"{e['first_batch_s'] or 0:.3f}", f"{j['cpu_s']:.2f}"])


def write_plot_data(bench: Bench, out: Path) -> None:
    """s3.dat and s6.dat: the medians the plots show."""
    s3 = [c for s, c in cases_in_order(bench) if s == "S3"]
    if s3:
        with open(out / "s3.dat", "w") as f:
            f.write(f"# S3 {bench.dataset_size} images, {os.cpu_count()} cores, joaderfs "
                    f"{bench.args.jfs_workers} workers, baseline {bench.args.workers} workers\n")
            f.write("# jobs joaderfs_aggregate baseline_aggregate joaderfs_cpu_ms "
                    "baseline_cpu_ms joaderfs_w0_aggregate joaderfs_w0_cpu_ms\n")
            for case in s3:
                vals = []
                for system in SYSTEMS + ("joaderfs-w0",):
                    runs = runs_of(bench, "S3", case, system)
                    vals += [med([x.aggregate for x in runs]),
                             med([x.cpu_ms_per_sample for x in runs])]
                # columns: joaderfs agg, baseline agg, joaderfs cpu, baseline cpu, w0 agg, w0 cpu
                row = [vals[0], vals[2], vals[1], vals[3], vals[4], vals[5]]
                f.write(" ".join([case.split()[0]] + [f"{v:.2f}" for v in row])
                        .replace("nan", "NaN") + "\n")
    s6 = [c for s, c in cases_in_order(bench) if s == "S6"]
    if s6:
        with open(out / "s6.dat", "w") as f:
            f.write(f"# S6 two jobs, subsets of {bench.dataset_size // 2} images\n")
            f.write("# overlap_pct joaderfs_decodes_per_sample baseline_decodes_per_sample "
                    "joaderfs_cpu_ms baseline_cpu_ms ideal_decodes_per_sample\n")
            for case in s6:
                pct = int(case.split("%")[0])
                vals = []
                for metric in (lambda x: x.decodes_per_delivered, lambda x: x.cpu_ms_per_sample):
                    for system in SYSTEMS:
                        vals.append(med([metric(x) for x in runs_of(bench, "S6", case, system)]))
                ideal = (2 - pct / 100) / 2
                f.write(f"{pct} {vals[0]:.4f} {vals[1]:.4f} {vals[2]:.2f} {vals[3]:.2f} "
                        f"{ideal:.4f}\n".replace("nan", "NaN"))


def plot(out: Path) -> list[str]:
    """Renders s3.png and s6.png from s3.dat and s6.dat in ``out``."""
    made = []
    s3 = out / "s3.dat"
    if s3.exists():
        text = s3.read_text()
        title = text.splitlines()[0].lstrip("# ")
        w0 = any(line.split()[5] != "NaN" for line in text.splitlines()
                 if line and not line.startswith("#"))
        w0_agg = (', \\\n     "" using 1:6 with linespoints lw 2 pt 9 dt 2 '
                  'title "joaderfs, DataLoader num_workers=0"') if w0 else ""
        w0_cpu = w0_agg.replace("1:6", "1:7")
        script = f"""
set terminal pngcairo size 1100,450 font ",10" noenhanced
set output "{out}/s3.png"
set multiplot layout 1,2 title "{title}: k jobs on the same data at the same speed"
set key top left
set grid
set xlabel "jobs"
set xtics 1
set datafile missing "NaN"
set ylabel "aggregate samples/s"
set yrange [0:*]
plot "{s3}" using 1:2 with linespoints lw 2 pt 7 title "joaderfs", \\
     "" using 1:3 with linespoints lw 2 pt 5 title "DataLoader baseline"{w0_agg}
set ylabel "CPU ms per delivered sample (daemon + jobs)"
plot "{s3}" using 1:4 with linespoints lw 2 pt 7 title "joaderfs", \\
     "" using 1:5 with linespoints lw 2 pt 5 title "DataLoader baseline"{w0_cpu}
unset multiplot
"""
        if run_gnuplot(script):
            made.append("s3.png")
    s6 = out / "s6.dat"
    if s6.exists():
        title = s6.read_text().splitlines()[0].lstrip("# ")
        script = f"""
set terminal pngcairo size 1100,450 font ",10" noenhanced
set output "{out}/s6.png"
set multiplot layout 1,2 title "{title} overlapping by x% (|D1 n D2| / |D1|)"
set key bottom left
set grid
set xlabel "overlap, % of each subset"
set xtics 25
set xrange [20:105]
set datafile missing "NaN"
set ylabel "decodes per delivered sample"
set yrange [0:1.2]
plot "{s6}" using 1:2 with linespoints lw 2 pt 7 title "joaderfs", \\
     "" using 1:3 with linespoints lw 2 pt 5 title "DataLoader baseline", \\
     "" using 1:6 with lines dt 2 lw 1 title "ideal: |D1 u D2| / (|D1| + |D2|)"
set ylabel "CPU ms per delivered sample (daemon + jobs)"
set yrange [0:*]
plot "{s6}" using 1:4 with linespoints lw 2 pt 7 title "joaderfs", \\
     "" using 1:5 with linespoints lw 2 pt 5 title "DataLoader baseline"
unset multiplot
"""
        if run_gnuplot(script):
            made.append("s6.png")
    return made


def run_gnuplot(script: str) -> bool:
    try:
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    except FileNotFoundError:
        print("gnuplot not found: no plots (apt-get install gnuplot-nox)", file=sys.stderr)
        return False
    if r.returncode != 0:
        print(f"gnuplot failed: {r.stderr}", file=sys.stderr)
    return r.returncode == 0


def machine_description(args, n: int) -> str:
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    sizes = []
    for root, _, files in os.walk(args.data):
        for name in files:
            sizes.append(os.path.getsize(os.path.join(root, name)))
    load = os.getloadavg()
    return (f"{platform.node()}: {os.cpu_count()} cores ({model}), {mem / 2**30:.0f} GiB RAM, "
            f"kernel {platform.release()}; dataset {args.data}: {n} images, "
            f"{len(sizes) and sum(sizes) / len(sizes) / 1024:.0f} KiB mean JPEG, "
            f"{sum(sizes) / MIB:.0f} MiB; batch {args.batch}, {args.workers} DataLoader workers "
            f"per job, size {args.size}, joaderfs ram_cache={args.ram_cache}; "
            f"load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")


def warm_page_cache(root: str) -> int:
    n = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(1 << 20):
                    pass
            n += 1
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="ImageFolder root (required unless --replot)")
    p.add_argument("--joaderfs", default=str(REPO / "build" / "joaderfs"))
    p.add_argument("--workdir", help="mountpoints, logs, caches (required unless --replot)")
    p.add_argument("--out", required=True, help="folder for table.md, CSV, PNG")
    p.add_argument("--pidfile", help="append started process-group ids here")
    p.add_argument("--scenarios", default="C,S1,S2,S3,S4,S5,S6",
                   help="C = component costs, S1..S6 = the paper's scenarios")
    p.add_argument("--reps", type=int, default=3,
                   help="runs of S1, S2 and S3 at 4 jobs, per system")
    p.add_argument("--reps-other", type=int, default=1, help="runs of the other cases")
    p.add_argument("--s3-jobs", default="1,2,3,4,5,6")
    p.add_argument("--s4-samples", type=int, default=960)
    p.add_argument("--s6-overlaps", default="25,50,75,100")
    p.add_argument("--s4-rate", type=float, default=0,
                   help="fastest S4 job's target samples/s (0: 3/4 of S1's joaderfs "
                        "speed, at most 150)")
    p.add_argument("--no-w0", dest="w0", action="store_false",
                   help="skip the joaderfs num_workers=0 variant in S1-S3")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=os.cpu_count(),
                   help="DataLoader workers of each baseline job")
    p.add_argument("--jfs-workers", type=int, default=os.cpu_count(),
                   help="DataLoader workers of each joaderfs job")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--ram-cache", default="2G")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--run-timeout", type=float, default=600)
    p.add_argument("--stall-timeout", type=float, default=120)
    p.add_argument("--replot", action="store_true",
                   help="only render the plots again from s3.dat and s6.dat in --out")
    args = p.parse_args()
    if args.replot:
        print(", ".join(plot(Path(args.out))) or "nothing to plot")
        return
    if not args.data or not args.workdir:
        p.error("--data and --workdir are required")
    args.s3_jobs = [int(k) for k in args.s3_jobs.split(",")]
    args.s6_overlaps = [int(k) for k in args.s6_overlaps.split(",")]
    args.data = os.path.abspath(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    bench = Bench(args)
    bench.s4_rates = []
    bench.costs = {}

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    started = time.monotonic()
    try:
        print(f"warming the page cache with {args.data}...", flush=True)
        bench.dataset_size = warm_page_cache(args.data)
        which = set(s.strip() for s in args.scenarios.split(","))
        scenarios(bench, which)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr, flush=True)
        bench.reaper.cleanup()
        sys.exit(130)
    finally:
        bench.reaper.cleanup()
    elapsed = time.monotonic() - started

    table = results_table(bench)
    target_table, target_rows = targets(bench)
    write_csv(bench, out)
    with open(out / "targets.json", "w") as f:
        json.dump(target_rows, f, indent=1)
    if bench.costs:
        with open(out / "costs.json", "w") as f:
            json.dump(bench.costs, f, indent=1)
    write_plot_data(bench, out)
    plots = plot(out)
    errors = [(r.scenario, r.case, r.system, r.rep, e) for r in bench.results for e in r.errors]
    text = [f"# joaderfs vs PyTorch DataLoader ({time.strftime('%Y-%m-%d %H:%M')})", "",
            machine_description(args, bench.dataset_size) + f"; suite {elapsed / 60:.1f} min.",
            "", "Medians of the runs; per-job lists in job order (S2: per epoch).", "",
            table, "", target_table, ""]
    if bench.costs:
        text += ["Component costs (one job, cold mount, first " +
                 f"{min(bench.dataset_size, 500)} images for PIL):", "",
                 costs_table(bench.costs, args), ""]
    if bench.s4_rates:
        text += [f"S4 target speeds: {fmt_list(bench.s4_rates)} samples/s.", ""]
    if plots:
        text += [f"Plots: {', '.join(plots)}.", ""]
    if errors:
        text += ["Problems seen:", ""]
        text += [f"- {s} {c} {sy} rep {rep}: {e}" for s, c, sy, rep, e in errors]
        text += [""]
    report = "\n".join(text)
    (out / "table.md").write_text(report)
    print()
    print(report)


if __name__ == "__main__":
    main()
