"""Helpers of the mount-method tests (tests/mount): autofs, mount(8) after
`cmake --install`, fstab lines, the log sink of a daemonized mount.

These tests mount the way users do, through programs that are not ours
(automount, mount(8), mount.fuse3), which run the daemon from fixed places
(/usr/local/bin, /sbin). So each scenario runs in a private mount namespace
(`unshare -m`), where binds and overlays put the built files there for that
scenario alone; the namespace's mounts go when its last process does. The
processes a scenario starts carry its private work folder in their command
lines, which is how the caller finds and kills them if the scenario itself
was killed.
"""

import json
import os
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional

import harness

# Where libmount looks for mount.TYPE helpers (util-linux's FS_SEARCH_PATH;
# /sbin is /usr/sbin on a merged-/usr system).
HELPER_DIR = "/sbin"


def fstype_at(path: str) -> Optional[str]:
    """The file system type mounted at `path` (the top one), else None.

    Only reads /proc: a lookup of an autofs mountpoint would count as a use
    and hold off its expiry, so `path` is taken as it is (no symlinks)."""
    path = os.path.abspath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                found = fields[fields.index("-") + 1]
    return found


def mount_options_at(path: str) -> List[str]:
    """The per-mount options (rw, nosuid, nodev, ...) of the mount at path
    (as fstype_at takes it)."""
    path = os.path.abspath(path)
    options: List[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                options = fields[5].split(",")
    return options


def super_options_at(path: str) -> List[str]:
    """The file system's own options (FUSE: user_id, allow_other, ...) of
    the mount at path (as fstype_at takes it)."""
    path = os.path.abspath(path)
    options: List[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                options = fields[fields.index("-") + 3].split(",")
    return options


def wait_until(pred: Callable[[], object], timeout: float,
               step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def _cmdline(pid: str) -> List[bytes]:
    with open("/proc/%s/cmdline" % pid, "rb") as f:
        return f.read().split(b"\0")


def pids_mentioning(token: str) -> List[int]:
    """Live processes (not this one) with `token` in their command line."""
    want = os.fsencode(token)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if any(want in arg for arg in _cmdline(entry)) and alive(int(entry)):
                out.append(int(entry))
        except OSError:
            continue
    return out


def daemon_pids(binary: str, mountpoint: str) -> List[int]:
    """Live joaderfs processes (exe `binary`) that name `mountpoint`."""
    want = os.path.realpath(binary)
    mnt = os.fsencode(mountpoint)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.path.realpath(os.readlink("/proc/%s/exe" % entry))
            if exe == want and mnt in _cmdline(entry) and alive(int(entry)):
                out.append(int(entry))
        except OSError:
            continue
    return out


def alive(pid: int) -> bool:
    try:
        return harness.proc_stat_fields(pid)[0] != b"Z"
    except (OSError, IndexError):
        return False


def process_table(token: str) -> str:
    """pid, pgrp, session, state, wait channel and command of each process
    naming `token`: what a hang looks like."""
    rows = []
    for pid in sorted(pids_mentioning(token)):
        try:
            fields = harness.proc_stat_fields(pid)
            with open("/proc/%d/wchan" % pid) as f:
                wchan = f.read().strip() or "-"
            cmd = b" ".join(_cmdline(str(pid))).decode("utf-8", "replace")
        except OSError:
            continue
        rows.append("%7d pgrp %7s sid %7s %s %-20s %s" % (
            pid, fields[2].decode(), fields[3].decode(), fields[0].decode(),
            wchan, cmd[:300]))
    return "\n".join(rows) or "(none)"


def holders(path: str) -> List[str]:
    """Processes with a cwd, root or open file under `path` (what keeps a
    mount busy), as "PID: LINK -> TARGET"."""
    path = os.path.abspath(path)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        links = ["cwd", "root"]
        try:
            links += ["fd/" + fd for fd in os.listdir("/proc/%s/fd" % entry)]
        except OSError:
            continue
        for link in links:
            try:
                target = os.readlink("/proc/%s/%s" % (entry, link))
            except OSError:
                continue
            if target == path or target.startswith(path + "/"):
                out.append("%s: %s -> %s" % (entry, link, target))
    return out


def read_one_record(mnt: str, job: str, size: int) -> Dict:
    """Reads /dataset/info, makes job `job` and reads its first record;
    returns the info, and the record's id, label, the manifest's label for
    that id and the record's shape."""
    with open(os.path.join(mnt, "dataset", "info")) as f:
        info = json.load(f)
    with open(os.path.join(mnt, "dataset", "manifest")) as f:
        rows = [row.split("\t") for row in f.read().splitlines() if row]
    manifest = {int(row[0]): int(row[1]) for row in rows}
    os.mkdir(os.path.join(mnt, "jobs", job))
    fd = os.open(os.path.join(mnt, "jobs", job, "next"), os.O_RDONLY)
    try:
        data = harness.read_exact(fd, harness.record_size(size * size * 3),
                                   timeout=60)
    finally:
        os.close(fd)
    rec = harness.parse_records(data)[0]
    return {"info": info, "id": rec.id, "label": rec.label,
            "manifest_label": manifest.get(rec.id),
            "shape": [rec.height, rec.width, rec.channels]}


def kill_processes(pids: List[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL what is left after `grace` seconds; reaps our
    own children and orphans (the harness made us a subreaper)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if alive(pid):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        if wait_until(lambda: not any(alive(p) for p in pids), grace):
            break
    reap()


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def lazy_unmount(path: str) -> None:
    if fstype_at(path) is not None:
        subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


def tail(path: str, lines: int = 60) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        return "(%s)" % e
    return "\n".join(text[-lines:])


def run_private(module_file: str, function: str, args: List[str],
                workdir: str, timeout: float) -> Dict:
    """Runs `function(*args)` of `module_file` in a private mount namespace
    and returns the dict it returned. Whatever happens, no process naming
    `workdir` is left running afterwards (and with them goes the
    namespace, and every mount made in it)."""
    code = ("import json, sys; sys.path.insert(0, %r); import %s as m; "
            "print(json.dumps(m.%s(*sys.argv[1:])))"
            % (os.path.dirname(os.path.abspath(module_file)),
               os.path.splitext(os.path.basename(module_file))[0], function))
    try:
        r = subprocess.run(["unshare", "-m", "--propagation", "private",
                            sys.executable, "-c", code] + list(args),
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        table = process_table(workdir)
        return {"error": "the scenario ran past %.0fs; processes:\n%s\n"
                         "stderr: %s" % (timeout, table, e.stderr)}
    finally:
        kill_processes(pids_mentioning(workdir))
    lines = r.stdout.splitlines()
    if r.returncode != 0 or not lines:
        return {"error": "scenario exited %d\nstdout: %s\nstderr: %s"
                         % (r.returncode, r.stdout[-4000:], r.stderr[-4000:])}
    out = json.loads(lines[-1])
    out["stderr"] = r.stderr[-4000:]
    return out


def can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
