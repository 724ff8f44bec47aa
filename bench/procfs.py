"""Figures of process trees read from /proc for the benchmark driver
(bench/driver.py): process groups and the peak memory of the jobs.  The
per-process readers are the daemon harness's (tests/integration/mountlib.py).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from mountlib import proc_stat_fields as stat_fields  # noqa: E402
from mountlib import proc_status_kib  # noqa: E402


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

