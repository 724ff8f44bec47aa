"""A PyTorch IterableDataset over one job; imports torch, unlike the rest.

::

    from torch.utils.data import DataLoader
    from joaderfs import JobDataset

    # The daemon decodes and prefetches: workers would only copy records
    # (docs/benchmarks.md measures num_workers=0 as the fastest and cheapest).
    loader = DataLoader(JobDataset("/mnt/imagenet/jobs/sweep-1"),
                        batch_size=256, num_workers=0)
    for epoch in range(epochs):
        for images, labels, ids in loader:  # images: [B, 3, H, W] uint8
            ...

Each DataLoader worker opens ``next`` on its own, so the daemon sees one
reader per worker and divides the job's samples among them: within an epoch
each sample reaches exactly one worker, once.  The epoch ends when every
worker has seen EOF.  The next ``for`` over the loader starts fresh workers
(``persistent_workers=False``, the default) that re-open ``next`` and so read
the next epoch; with ``persistent_workers=True`` the same workers iterate the
dataset again, which re-opens it just the same.  Samples are not shuffled on
the client: the daemon already hands each job a uniformly random order.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch
from torch.utils.data import IterableDataset

from .stream import JobReader, PathLike, Record

Transform = Callable[[torch.Tensor], Any]


class JobDataset(IterableDataset):
    """Yields ``(image, label, id)`` for one epoch per iteration.

    ``image`` is a uint8 RGB tensor: ``[3, H, W]`` by default
    (``layout="CHW"``, what torchvision transforms and models expect; a view
    of the ``[H, W, 3]`` buffer read from the stream, not a copy), or
    ``[H, W, 3]`` with ``layout="HWC"``.  ``transform``, if given, is
    applied to the image in the worker: torchvision transforms that take
    tensors (RandomHorizontalFlip, ConvertImageDtype, Normalize...) or any
    callable.  ``label`` and ``id`` are ints.  To be stacked into batches,
    samples need one output size (``size=N``, N > 0).
    """

    def __init__(self, job: PathLike, layout: str = "CHW",
                 transform: Transform | None = None) -> None:
        super().__init__()
        if layout not in ("CHW", "HWC"):
            raise ValueError(f"layout must be 'CHW' or 'HWC', not {layout!r}")
        self._reader = JobReader(job)
        self._chw = layout == "CHW"
        self._transform = transform

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        # records() opens the file now, when the worker starts, so that no
        # worker joins after the others have emptied the epoch.
        return self._samples(self._reader.records())

    def _samples(self, records: Iterator[Record]
                 ) -> Iterator[tuple[Any, int, int]]:
        for record in records:
            image: Any = torch.from_numpy(record.image)
            if self._chw:
                image = image.permute(2, 0, 1)
            if self._transform is not None:
                image = self._transform(image)
            yield image, record.label, record.id
