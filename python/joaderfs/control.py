"""Making jobs and reading the JSON and TSV files of a joaderfs mount."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Union

from .stream import PathLike

Spec = Union[Mapping[str, Any], str]

_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class ManifestEntry(NamedTuple):
    id: int
    label: int
    relpath: str


def job_dir(mount: PathLike, job_id: str) -> Path:
    """``MOUNT/jobs/JOB_ID``, after checking the id is a valid job id."""
    if not _JOB_ID.fullmatch(job_id) or job_id in (".", ".."):
        raise ValueError(f"bad job id {job_id!r}: 1-64 characters of "
                         f"[A-Za-z0-9._-]")
    return Path(mount) / "jobs" / job_id


def format_spec(spec: Spec) -> str:
    """A spec file's text: a string as is, a mapping as key=value lines."""
    if isinstance(spec, str):
        return spec
    lines = []
    for key, value in spec.items():
        text = str(value)
        if not key or any(c.isspace() or c == "=" for c in key) or any(
                c.isspace() for c in text):
            raise ValueError(f"bad spec entry {key!r}: {value!r}")
        lines.append(f"{key}={text}\n")
    return "".join(lines)


def make_job(mount: PathLike, job_id: str, spec: Spec | None = None,
             exist_ok: bool = False) -> Path:
    """Creates ``MOUNT/jobs/JOB_ID``, writes its spec if given, returns it.

    ``spec`` is a mapping such as ``{"subset": "classes:0-9", "epochs": 2}``
    or the spec text.  Raises ``RejectedWrite`` (a ValueError) with the
    daemon's reason if the daemon rejects the spec; the job made here is then
    removed again (one that already existed is kept).

    A rerun of the same script finds its job: an existing job with the spec
    given is returned as it is (its epoch goes on; ``resume`` starts one
    again), and one with another spec raises ``RejectedWrite`` saying to
    use a new job id or remove the old job.  With ``exist_ok`` an existing
    job's spec is written instead (the daemon judges it: a started job takes
    only its own again).  Without a spec an existing job raises
    ``FileExistsError`` unless ``exist_ok``.
    """
    path = job_dir(mount, job_id)
    try:
        path.mkdir()
    except FileExistsError:
        if exist_ok:
            if spec is not None:
                write_spec(path, spec)
            return path
        if spec is None:
            raise
        _rerun(path, job_id, spec)
        return path
    if spec is not None:
        try:
            write_spec(path, spec)
        except BaseException:
            path.rmdir()
            raise
    return path


def _rerun(path: Path, job_id: str, spec: Spec) -> None:
    """An existing job asked for again with ``spec``: nothing when it has
    that spec, else ``RejectedWrite`` naming the fix (its spec is left as it
    was)."""
    before = (path / "spec").read_text()
    fix = (f"job {job_id} exists with another spec; use a new job id, or "
           f"remove the old job first (os.rmdir({str(path)!r}))")
    try:
        write_spec(path, spec)  # a started job takes only the same spec again
    except RejectedWrite as e:
        raise RejectedWrite(f"{e} ({fix})", e.reason) from e.__cause__
    if (path / "spec").read_text() != before:  # not started: it took a new spec
        write_spec(path, before)
        raise RejectedWrite(fix, None)


# The errors of a write the daemon judged and refused, its reason left in
# the job's ``error`` file: a bad value (EINVAL), a started job's spec or
# subset that differs (EBUSY), a limit (EDQUOT).
REJECTED_ERRNOS = (errno.EINVAL, errno.EBUSY, errno.EDQUOT)


def write_spec(job: PathLike, spec: Spec) -> None:
    """Replaces a job's spec; possible until its ``next`` is first read,
    and after that with the same spec (a rerun of the same script).
    Raises ``RejectedWrite`` with the daemon's reason for a bad spec, or
    one that differs from a started job's."""
    text = format_spec(spec)
    try:
        # One write call: each write to spec replaces the whole spec.
        _write_all(Path(job) / "spec", text.encode(), whole=True)
    except OSError as e:
        if e.errno in REJECTED_ERRNOS:
            raise rejected_write(job, "spec", text) from e
        raise


def write_ids(job: PathLike, ids: Iterable[int | str]) -> None:
    """Sets a job's subset to the given sample ids or relative paths (on a
    started job, only the same subset again).  Raises ``RejectedWrite``
    with the daemon's reason for a bad id or a subset that differs."""
    text = "".join(f"{i}\n" for i in ids)
    try:
        _write_all(Path(job) / "ids", text.encode(), whole=False)
    except OSError as e:
        if e.errno in REJECTED_ERRNOS:
            raise rejected_write(job, "ids", text) from e
        raise


class RejectedWrite(ValueError):
    """The daemon refused a write to a job's ``spec``, ``ids`` or ``resume``
    (one of ``REJECTED_ERRNOS``; the OSError is its ``__cause__``).
    ``reason`` is the job's ``error`` file, ``<file>: <why>``, or None with
    a daemon too old to have one."""

    def __init__(self, message: str, reason: str | None) -> None:
        super().__init__(message)
        self.reason = reason


def rejected_write(job: PathLike, name: str, text: str) -> RejectedWrite:
    """The exception for a write to ``job``'s file ``name`` that the daemon
    refused, carrying the reason it left in the job's ``error``."""
    try:
        reason = (Path(job) / "error").read_text().strip() or None
    except FileNotFoundError:  # a daemon without the error file
        reason = None
    shown = text if len(text) <= 200 else text[:200] + "..."
    if reason is None:
        why = "(the daemon log says why)"
    else:
        why = f"because {reason}"
    return RejectedWrite(f"joaderfs rejected the {name} {shown!r} of {job} "
                         f"{why}", reason)


def remove_job(mount: PathLike, job_id: str) -> None:
    """Ends a job: the daemon releases its cache references."""
    job_dir(mount, job_id).rmdir()


def read_stats(mount: PathLike) -> dict[str, Any]:
    """The mount's ``/stats``: decoded, delivered, ram_hits, jobs, ..."""
    return _read_json(Path(mount) / "stats")


def job_status(job: PathLike, job_id: str | None = None) -> dict[str, Any]:
    """A job's ``status`` (epoch, delivered, remaining, subset_size,
    readers...), given the job's folder as every other helper takes it, or
    the older ``(mount, job_id)``."""
    path = Path(job) if job_id is None else job_dir(job, job_id)
    return _read_json(path / "status")


def dataset_info(mount: PathLike) -> dict[str, Any]:
    """``/dataset/info``: source, samples, classes, size."""
    return _read_json(Path(mount) / "dataset" / "info")


def read_manifest(mount: PathLike) -> list[ManifestEntry]:
    """``/dataset/manifest``: every sample's id, label and relative path.

    Lines end at ``\n`` only (no path holds a control character; other
    line breaks ``str.splitlines`` knows, such as U+2028, may be part of a
    name), and a path that is not UTF-8 comes back as ``os.fsdecode`` gives
    it, so that it opens the same file."""
    text = (Path(mount) / "dataset" / "manifest").read_bytes().decode("utf-8", "surrogateescape")
    entries = []
    for line in text.split("\n"):
        if line:
            sample_id, label, relpath = line.split("\t", 2)
            entries.append(ManifestEntry(int(sample_id), int(label), relpath))
    return entries


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_bytes())


def _write_all(path: Path, data: bytes, whole: bool) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            if whole and n != len(data):
                raise OSError(errno.EIO, f"short write ({n} of {len(data)} "
                              f"bytes)", str(path))
            view = view[n:]
    finally:
        os.close(fd)
