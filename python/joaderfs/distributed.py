"""Which rank's stream a process reads: torch.distributed's rank by default,
or JAX's process index (``jax_rank``).

A job with ``ranks=W`` has one stream file per rank, ``next.0`` ...
``next.<W-1>`` (docs/design.md 2.6).  In a torch.distributed program each
process reads the stream of its own rank: ``default_rank`` returns it when a
process group exists and the caller gave none.  Imports torch only if it is
already imported (a program without it has no process group).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .stream import PathLike


def default_rank(job: PathLike, rank: int | None) -> int | None:
    """``rank`` if given; else torch.distributed's rank when a process group
    is initialised and ``job`` is a job directory with ``ranks=W`` (checked
    against the world size); else None (the job's ``next``)."""
    if rank is not None:
        return rank
    dist = initialised_process_group()
    path = Path(job)
    if dist is None or not path.is_dir():
        return None
    return _checked_rank(path, dist.get_rank(), dist.get_world_size(),
                         "torch.distributed's world size")


def jax_rank(job: PathLike) -> int | None:
    """The stream a JAX process reads: ``jax.process_index()`` of a job with
    ``ranks=jax.process_count()``; None (the job's ``next``) for a job
    without ranks in a single-process program.  Each process of a
    multi-process JAX program (``jax.distributed.initialize()``) reads its
    own ``next.<process_index>``."""
    import jax
    path = Path(job)
    if not path.is_dir():
        return None
    return _checked_rank(path, jax.process_index(), jax.process_count(),
                         "jax.process_count()")


def _checked_rank(job: Path, rank: int, world: int, what: str) -> int | None:
    ranks = _job_ranks(job)
    if ranks == 0:
        if world > 1:
            raise ValueError(f"{job} has no ranks=: with {world} processes "
                             f"write ranks={world} to its spec, or pass rank=")
        return None
    if ranks != world:
        raise ValueError(f"{job} has ranks={ranks} but {what} is {world}")
    return rank


def initialised_process_group():
    """torch.distributed when a process group is initialised, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _job_ranks(job: Path) -> int:
    for token in (job / "spec").read_text().split():
        key, _, value = token.partition("=")
        if key == "ranks":
            return int(value)
    return 0
