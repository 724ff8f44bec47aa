"""Runs of the benchmark: jobs (bench/throughput/job.py processes) against a fresh
daemon or on their own, the component costs, and the scenarios S1-S6 of
docs/benchmarks.md (bench/throughput/driver.py)."""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.procfs import MemoryMonitor

from bench.processes import Reaper

# One job of a run: a process of its own (bench/throughput/job.py).
JOB_COMMAND = [sys.executable, "-m", "bench.throughput.job"]
MIB = 1 << 20
# joaderfs-w0: joaderfs read by a DataLoader with num_workers=0 (the daemon
# already decodes ahead, so worker processes only move bytes); joaderfs-batch:
# the batch path (JobDataset(batch_size=B)) with --jfs-workers workers.
SYSTEMS = ("joaderfs", "baseline")
ALL_SYSTEMS = ("joaderfs", "joaderfs-w0", "joaderfs-batch", "baseline")


def is_jfs(system: str) -> bool:
    return system.startswith("joaderfs")


def job_args(system: str, args) -> list[str]:
    """job.py's --system, --workers and --batch-path for a system."""
    if not is_jfs(system):
        return ["--system", "baseline", "--workers", str(args.workers)]
    workers = 0 if system == "joaderfs-w0" else args.jfs_workers
    return (["--system", "joaderfs", "--workers", str(workers)] +
            (["--batch-path"] if system == "joaderfs-batch" else []))


@dataclass
class JobPlan:
    name: str
    epochs: int = 1
    delay: float = 0.0            # seconds per batch
    range: tuple[int, int] | None = None  # inclusive ids; None = all
    start_after: tuple[int, float] | None = None  # (job index, fraction of its epoch)
    spec: str = ""                # joaderfs: more spec keys (crop=, flip=)


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


def parse_options(text: str) -> dict[str, str]:
    """``k=v,k=v`` mount options as a dict (later keys win)."""
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


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
                opts = {"ram_cache": args.ram_cache, "seed": str(args.seed),
                        "size": str(args.size), "cache_dir": "none"}
                if cache_dir:
                    cache_path = self.workdir / f"cache-{tag}"
                    cache_path.mkdir()
                    opts["cache_dir"] = str(cache_path)
                opts.update(parse_options(mount_options))
                daemon = self.reaper.mount(self.workdir, tag, opts, args.joaderfs,
                                           args.data)
            for i, plan in enumerate(plans):
                cmd = [*JOB_COMMAND, *job_args(system, args),
                       "--epochs", str(plan.epochs), "--batch", str(args.batch),
                       "--delay", f"{plan.delay:.6f}",
                       "--size", str(args.size), "--seed", str(args.seed + i),
                       "--progress", str(self.workdir / f"progress-{tag}-{i}"),
                       "--result", str(self.workdir / f"result-{tag}-{i}.json")]
                if is_jfs(system):
                    cmd += ["--job-dir", os.path.join(daemon.mnt, "jobs", plan.name)]
                    spec = [plan.spec] if plan.spec else []
                    if plan.range:
                        spec.append(f"subset=range:{plan.range[0]}-{plan.range[1]}")
                    if spec:
                        cmd += ["--spec", " ".join(spec)]
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
                                     stderr=err, text=True,
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
                        detail += f"; daemon:\n{daemon.diagnostics(tail=15)}"
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
            self.reaper.end(procs)
            if daemon:
                self.reaper.stop(daemon)
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
    r = subprocess.run([sys.executable, "-m", "bench.throughput.pil_cost", a.data, str(a.size), str(limit)],
                       capture_output=True, text=True, timeout=900)
    if r.returncode == 0:
        pil_ms, pil_faults = r.stdout.split()
        out["pil_ms"], out["pil_faults"] = float(pil_ms), float(pil_faults)
    else:
        print(f"  PIL cost failed: {r.stderr[-500:]}", file=sys.stderr)
    d = bench.reaper.mount(bench.workdir, "costs",
                           {"ram_cache": a.ram_cache, "seed": str(a.seed),
                            "size": str(a.size), "cache_dir": "none"}, a.joaderfs, a.data)
    try:
        job = os.path.join(d.mnt, "jobs", "raw")
        os.mkdir(job)
        s0, c0, f0 = d.stats(), d.cpu(), d.minflt()
        read_epoch_raw(job)
        s1, c1, f1 = d.stats(), d.cpu(), d.minflt()
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
        for path, workers in [(path, w) for path in ("", "batch")
                              for w in sorted({0, a.jfs_workers})]:
            key = f"client_{path}{'_' if path else ''}w{workers}"
            result = bench.workdir / f"costs-{key}.json"
            cmd = [*JOB_COMMAND, "--system", "joaderfs",
                   "--job-dir", os.path.join(d.mnt, "jobs", key.replace("_", "-")),
                   "--batch", str(a.batch), "--workers", str(workers),
                   "--size", str(a.size), "--result", str(result)]
            if path:
                cmd.append("--batch-path")
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, start_new_session=True)
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
                out[f"{key}_ms"] = 1000 * res["cpu_s"] / n
                out[f"{key}_daemon_ms"] = 1000 * (c4 - c3) / n
                out[f"{key}_decodes"] = s4["decoded"] - s3["decoded"]
                out[f"{key}_rate"] = n / sum(e["seconds"] for e in res["epochs"])
            finally:
                bench.reaper.end([p])
    finally:
        bench.reaper.stop(d)
    return out


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
            if k in (4, 6):
                # The target cases: repeated; the num_workers=0 variant once.
                bench.pair("S3", case, plans, reps)
                if a.w0:
                    bench.pair("S3", case, plans, a.reps_other, systems=("joaderfs-w0",))
                if a.batch_path:
                    bench.pair("S3", case, plans, reps, systems=("joaderfs-batch",))
                # Issue 11: per-job random crops and flips keep at least 80%
                # of the centre-crop figure, measured in the same run.
                augmented = [JobPlan(f"s3-{i}", spec="crop=random flip=0.5") for i in range(k)]
                bench.pair("S3", case + " random-crop flip-0.5", augmented, reps,
                           systems=("joaderfs",))
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


def warm_page_cache(root: str) -> int:
    n = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(1 << 20):
                    pass
            n += 1
    return n
