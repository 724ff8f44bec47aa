#!/usr/bin/python3
"""One training job of the demo, and the demo's report.

    demo_job.py run MOUNT JOB_ID [--spec SPEC] [--workers N] [--batch B]
        makes the job, reads one epoch through a torch DataLoader and prints
        one JSON line: job, spec, samples, unique, seconds, samples_per_s.
    demo_job.py report MOUNT RESULT_FILE...
        prints the jobs' results and the mount's /stats as tables.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import joaderfs  # this checkout's python/ (demo.sh sets PYTHONPATH)


def run(args: argparse.Namespace) -> None:
    from torch.utils.data import DataLoader

    job = joaderfs.make_job(args.mount, args.job_id, args.spec)
    # Whole batches read by the dataset; the DataLoader only runs workers.
    loader = DataLoader(joaderfs.JobDataset(job, batch_size=args.batch),
                        batch_size=None, num_workers=args.workers,
                        persistent_workers=True)
    start = time.monotonic()
    ids: list[int] = []
    for images, _labels, batch_ids in loader:
        # A stand-in for the training step: touch every pixel.
        images.float().mean()
        ids += batch_ids.tolist()
    seconds = time.monotonic() - start
    print(json.dumps({
        "job": args.job_id, "spec": args.spec or "", "samples": len(ids),
        "unique": len(set(ids)), "seconds": round(seconds, 2),
        "samples_per_s": round(len(ids) / seconds, 1)}))


def table(rows: list[list[object]]) -> str:
    """Left-aligned first column, the others right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = []
    for row in cells:
        parts = [row[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(parts))
    return "\n".join(lines)


def report(args: argparse.Namespace) -> None:
    results = [json.loads(Path(f).read_text()) for f in args.results]
    print(table([["job", "spec", "samples", "unique", "seconds",
                  "samples/s"]] +
                [[r["job"], r["spec"], r["samples"], r["unique"],
                  f"{r['seconds']:.1f}", f"{r['samples_per_s']:.0f}"]
                 for r in results]))
    stats = joaderfs.read_stats(args.mount)
    print()
    mib = 1 << 20
    print(table([
        ["/stats", "value"],
        ["decoded", stats["decoded"]],
        ["delivered", stats["delivered"]],
        ["ram_hits", stats["ram_hits"]],
        ["disk_hits", stats["disk_hits"]],
        ["skipped", stats["skipped"]],
        ["ram MiB used / budget",
         f"{stats['ram_bytes'] / mib:.0f} / {stats['ram_budget'] / mib:.0f}"],
    ]))
    if stats["decoded"]:
        print(f"\n{stats['delivered'] / stats['decoded']:.2f} samples "
              f"delivered per image decoded")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="read one epoch of a job")
    run_parser.add_argument("mount")
    run_parser.add_argument("job_id")
    run_parser.add_argument("--spec", help="job spec, e.g. subset=classes:0-4")
    run_parser.add_argument("--workers", type=int, default=2)
    run_parser.add_argument("--batch", type=int, default=64)
    report_parser = commands.add_parser("report", help="print the tables")
    report_parser.add_argument("mount")
    report_parser.add_argument("results", nargs="+")
    args = parser.parse_args()
    {"run": run, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
