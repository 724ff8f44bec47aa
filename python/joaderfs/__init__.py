"""Python client of joaderfs: read a job's decoded samples from its mount.

A job is a directory ``MOUNT/jobs/<id>``; its ``next`` file streams decoded
samples (joaderfs-stream(5)).  Opening ``next`` makes one reader; reading it
to EOF reads one epoch; opening it again reads the next epoch.

- ``JobReader(job)``: iterate to get ``(image, label, id)``, image an
  (H, W, 3) uint8 numpy array; ``records()`` also gives each epoch.
- ``iter_batches(job, batch_size)``: numpy batches, read with a few large
  reads into one array per batch (``BatchStream``).
- ``tf_dataset(job, batch_size)``: a ``tf.data.Dataset`` of ``(images,
  labels)`` batches for Keras ``model.fit`` (imports TensorFlow).
- ``jax_batches(job, batch_size)``: batches put on a JAX device ahead of
  the training step; ``jax_rank`` picks a process's stream from
  ``jax.process_index()`` (imports JAX).
- ``grain_dataset(job, batch_size=B)``: a Grain ``IterDataset`` of dicts
  (``image``, ``label``, ``id``, ``epoch``); its iterators' states, Grain's
  checkpoints, resume the job exactly, also under ``mp_prefetch`` (imports
  grain).
- ``JobDataset(job, batch_size=B)``: a torch IterableDataset of whole
  batches for ``DataLoader(..., batch_size=None)``; without ``batch_size``,
  of single samples (imports torch on first use).  DataLoader workers take
  whole batches of the epoch (``shares``): ceil(N/B) batches per epoch
  whatever ``num_workers``.
- ``make_job``, ``read_stats``, ``job_status(job)``, ``dataset_info``,
  ``read_manifest``: the control files.  A write the daemon rejects raises
  ``RejectedWrite`` with the reason it left in the job's ``error`` file;
  the same spec written again after the first read (a rerun) succeeds.
- ``StreamState``: the ids the training process has received this epoch,
  as a ``state_dict`` for checkpoints; ``load_state_dict`` resumes exactly
  (``write_resume`` writes the ``resume`` file itself);
  ``elastic_state_dict`` gathers the ranks' ids into a state that resumes
  the job on any number of ranks (``merge_states`` without torch).
- ``rank=`` (``JobDataset``, ``StreamState``) defaults to torch.distributed's
  rank when a process group exists and the job has ``ranks=W``.

Only numpy is needed, apart from ``JobDataset``, ``tf_dataset``,
``jax_batches`` and ``grain_dataset``.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from typing import Any

from .batches import HEADER_DTYPE, Batch, BatchStream, iter_batches
from .control import (ManifestEntry, RejectedWrite, dataset_info,
                      format_spec, job_dir, job_status, make_job,
                      read_manifest, read_stats, remove_job, write_ids,
                      write_spec)
from .distributed import default_rank, jax_rank
from .resume import StreamState, merge_states, write_resume
from .stream import (JobReader, Record, RecordHeader, RecordStream,
                     StreamError, next_path, open_next, parse_header,
                     read_records)

__all__ = [
    "HEADER_DTYPE", "Batch", "BatchStream", "JobDataset", "JobReader",
    "ManifestEntry", "Record", "RecordHeader", "RecordStream",
    "RejectedWrite", "StreamError", "StreamState", "dataset_info",
    "default_rank", "format_spec", "grain_dataset", "iter_batches",
    "jax_batches", "jax_rank", "job_dir", "job_status", "make_job",
    "merge_states",
    "next_path", "open_next", "parse_header", "read_manifest",
    "read_records", "read_stats", "remove_job", "tf_dataset", "write_ids",
    "write_resume", "write_spec",
]

# Imported on first use: torch, TensorFlow and JAX are heavy and optional.
_LAZY = {"JobDataset": "torch_dataset", "tf_dataset": "tf_data",
         "jax_batches": "jax_data", "grain_dataset": "grain_data"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
