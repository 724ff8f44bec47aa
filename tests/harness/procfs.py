"""Figures of processes read from /proc: CPU and memory of one process
(the daemon's), and of process groups and trees (the benchmark's jobs)."""

from __future__ import annotations

import os
import threading

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (field 3 onward:
    state is [0], ppid [1], pgrp [2], minflt [7], utime [11], stime [12])."""
    with open("/proc/%s/stat" % pid, "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2:].split()


def proc_cpu(pid):
    """utime + stime of a live process (all its threads), in seconds."""
    fields = proc_stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu(root: int) -> float:
    """CPU seconds of process `root` and every live descendant (its
    DataLoader workers...), each with its reaped children's: user + system,
    all threads."""
    fields = dict(all_stat_fields())
    children: dict[int, list[int]] = {}
    for pid, f in fields.items():
        children.setdefault(int(f[1]), []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        f = fields.get(pid)
        if f is None:
            continue
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        todo.extend(children.get(pid, ()))
    return total / CLK_TCK


def proc_status_kib(pid, key):
    """A kB figure of /proc/PID/status (VmHWM, VmRSS...), None if gone."""
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_bytes(pid):
    """The resident set of a live process, in bytes."""
    kib = proc_status_kib(pid, "VmRSS")
    if kib is None:
        raise AssertionError("no VmRSS for %s" % pid)
    return kib * 1024


def proc_memory(pid):
    """VmRSS and VmHWM (the peak) of a live process, in bytes."""
    rss, hwm = proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "VmHWM")
    if rss is None or hwm is None:
        raise AssertionError("no VmRSS/VmHWM for %s" % pid)
    return rss * 1024, hwm * 1024


def reset_peak(pid):
    """Starts VmHWM afresh (Linux >= 4.0: writing 5 to clear_refs)."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def all_stat_fields():
    """(pid, stat_fields) of every process still there when read."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            yield int(name), proc_stat_fields(name)
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

