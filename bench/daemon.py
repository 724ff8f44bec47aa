"""A joaderfs daemon per benchmark run, and the bookkeeping that ends every
process and mount the benchmark started (bench/driver.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from procfs import group_alive, proc_cpu, proc_status_kib


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


def is_mounted(mnt: str) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def unmount(mnt: str, lazy_fallback: bool = False) -> None:
    if not is_mounted(mnt):
        return
    r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
    if r.returncode != 0 and lazy_fallback:
        subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)


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
