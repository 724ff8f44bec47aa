"""The one joaderfs harness: mount-level tests (tests/integration,
tests/tiers, tests/sampling, tests/parity), the Python client's tests
(python/tests) and the benchmarks (bench/) mount, read, measure and unmount
through it.

Everything here is written from the contract (docs/design.md), not from the
daemon's sources: datasets are made with PIL, records are parsed by hand
(with the client's own header layout), the expected pixels come from an
independent PIL decode.

Modules:
  daemon    the joaderfs process: Mount, DaemonProcess, the mount options
  datasets  generated ImageFolder trees, their order and reference pixels,
            the textures dataset of the parity test and benchmark
  records   parsing and reading a job's record stream
  procfs    CPU and memory figures of processes, from /proc
  tiers     the disk tier's files seen from outside
  cases     the unittest bases (JoaderTestCase, DatasetMixin, TierTestCase)
  convergence  the convergence-parity experiment (imports torch; not
            re-exported here)
  __main__  `python3 -m harness textures OUTDIR` writes the textures dataset

Importing it makes this process a child subreaper (harness.daemon).  It is
found through PYTHONPATH=<repo>/tests:<repo>/python, which CTest sets for
every test and scripts/bench.sh for every benchmark.  Every name below is
re-exported so that `harness.X` is what the old `mountlib.X` was.
"""

from .cases import (DatasetMixin, JoaderTestCase, TierTestCase, log,
                    wait_for)
from .daemon import (BASE_OPTIONS, BIN, FUSERMOUNT, MOUNT_TIMEOUT, PIXELS,
                     SIZE, DaemonProcess, Mount, become_subreaper,
                     daemon_pid, format_options, is_mounted, parse_spec,
                     require_binary)
from .datasets import (DEFAULT_LAYOUT, SIZES, TEXTURE_CLASSES, _image,
                       imagefolder_order, make_dataset, make_imagefolder,
                       make_textures, reference_pixels, rewrite_image,
                       small_layout, texture_image)
from .procfs import (CLK_TCK, MemoryMonitor, group_alive, proc_cpu, proc_memory,
                     proc_stat_fields, proc_status_kib, reset_peak, rss_bytes)
from .records import (EPOCH_TIMEOUT, HEADER, MAGIC, RECORD, PacedReader,
                      Record, StreamError, digests, ids_of, parse_records,
                      payload_digest, read_epoch, read_exact, read_to_eof,
                      record_size)
from .tiers import SLOT, cache_files, flip_bytes, slot_bytes

__all__ = [
    "BASE_OPTIONS", "BIN", "CLK_TCK", "DEFAULT_LAYOUT", "EPOCH_TIMEOUT",
    "FUSERMOUNT", "HEADER", "MAGIC", "MOUNT_TIMEOUT", "PIXELS", "RECORD",
    "SIZE", "SIZES", "SLOT", "TEXTURE_CLASSES", "DaemonProcess",
    "DatasetMixin", "JoaderTestCase", "MemoryMonitor", "Mount",
    "PacedReader", "Record", "StreamError", "TierTestCase",
    "become_subreaper", "cache_files", "daemon_pid", "digests", "flip_bytes",
    "format_options", "group_alive", "ids_of", "imagefolder_order",
    "is_mounted", "log", "make_dataset", "make_imagefolder", "make_textures",
    "parse_records", "parse_spec", "payload_digest", "proc_cpu",
    "proc_stat_fields", "proc_status_kib", "read_epoch", "read_exact",
    "read_to_eof", "record_size", "reference_pixels", "rewrite_image",
    "slot_bytes", "small_layout", "texture_image", "wait_for",
]
