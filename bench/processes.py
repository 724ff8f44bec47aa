"""The processes and mounts a benchmark starts, and their ending, for
every bench group (the jobs of bench/throughput, the training processes of
bench/client, the drift jobs of bench/scale):

  end_processes  in a ``finally``: kills what is still running of a list
                 of Popen, reaps each and closes its pipes;
  Reaper         every process group and daemonized mount a run started,
                 ended on error, exit or signal (bench/throughput/driver.py),
                 their pids also kept in bench.sh's pidfile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from harness.daemon import Mount
from harness.procfs import group_alive


def end_processes(procs: list[subprocess.Popen],
                  kill: Callable[[subprocess.Popen], None] | None = None
                  ) -> None:
    """Ends each of ``procs`` that is still running (``kill(p)``, by default
    SIGKILL to the process), waits for it, and closes its pipes."""
    for p in procs:
        if p.poll() is None:
            if kill is None:
                p.kill()
            else:
                kill(p)
        p.wait()
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:  # e.g. a broken pipe flushing stdin
                    pass


class Reaper:
    """Every process group and mount this program started, for cleanup.

    Pids are also appended to ``pidfile`` so that bench.sh's trap can end
    them if this program itself is killed (a daemonized joaderfs leads a
    session, hence a process group, of its own).
    """

    def __init__(self, pidfile: Path | None) -> None:
        self.pidfile = pidfile
        self.groups: set[int] = set()
        self.mounts: set[Mount] = set()
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

    def mount(self, workdir: Path, name: str, options: dict[str, str],
              binary: str, source: str) -> Mount:
        """A daemonized joaderfs over ``source`` in ``workdir/name``, as
        users run it, logging at info level."""
        m = Mount(source, str(workdir / name), dict(options, log_level="info"),
                  defaults={}, binary=binary)
        m.mount_timeout = 300  # scanning a large dataset
        self.mounts.add(m)
        try:
            m.start()
        except AssertionError as e:
            self.stop(m)
            raise RuntimeError(str(e)) from None
        self.add_group(m.proc.pid)
        return m

    def stop(self, m: Mount) -> None:
        """Unmounts and reaps ``m`` (SIGTERM, then SIGKILL if it hangs)."""
        m.cleanup()
        if m.proc is not None:
            self.drop_group(m.proc.pid)
        self.mounts.discard(m)

    def cleanup(self) -> None:
        for pid in list(self.groups):
            self.kill_group(pid)
        for m in list(self.mounts):
            self.stop(m)
        self.groups.clear()

    def end(self, procs: list[subprocess.Popen]) -> None:
        """end_processes over ``procs``, each the leader of a process group
        of its own (``start_new_session``) added here: those still running
        are ended by kill_group, then their groups dropped."""
        end_processes(procs, kill=lambda p: self.kill_group(p.pid))
        for p in procs:
            self.drop_group(p.pid)
