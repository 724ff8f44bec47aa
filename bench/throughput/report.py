"""Tables, CSV files and plots of the benchmark's results (bench/throughput/driver.py)."""

from __future__ import annotations

import csv
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .scenarios import MIB, ALL_SYSTEMS, SYSTEMS, Bench, RunResult, is_jfs


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
    if any(r.system == "joaderfs-batch" for r in bench.results):
        variants.append(("joaderfs-batch", " [variant: batch path, "
                         f"num_workers={bench.args.jfs_workers}]"))
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
    for case, batch_goal, other_goal in (("4 jobs", 4.0, 3.5), ("6 jobs", 5.0, None)):
        for system, label in variants:
            if ("S3", case) not in have:
                continue
            r = paired_ratio(bench, "S3", case, lambda x: x.aggregate, num=system)
            goal = batch_goal if system == "joaderfs-batch" else other_goal
            if goal is None:
                add(f"S3 {case}: aggregate samples/s vs baseline{label}", f"{r:.2f}x",
                    "(no target)", None)
            else:
                add(f"S3 {case}: aggregate samples/s vs baseline{label}", f"{r:.2f}x",
                    f">= {goal}x", r >= goal)
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
    for path, what in (("", "per-sample JobDataset + DataLoader"),
                       ("batch_", "the batch path, JobDataset(batch_size=B)")):
        for w in sorted({0, args.jfs_workers}):
            key = f"client_{path}w{w}"
            add(f"job reading RAM hits through {what}, num_workers={w} "
                f"(incl. its workers)", f"{key}_ms",
                f"{c.get(f'{key}_rate', 0):.0f} samples/s; daemon "
                f"{c.get(f'{key}_daemon_ms', 0):.2f} ms/sample; "
                f"{c.get(f'{key}_decodes', 0):.0f} decodes")
    return "\n".join(lines)
