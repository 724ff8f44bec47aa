"""A Grain input pipeline that survives being killed: its iterator's state,
checkpointed with the parameters, resumes the job exactly, in the middle
of an epoch, also with the pipeline's worker processes (``--workers``).

``joaderfs.grain_dataset`` is a Grain ``IterDataset`` of whole batches of
the job; one iterator reads all ``--epochs`` epochs.  Every
``--checkpoint-every`` steps the iterator's ``get_state()`` (JSON) and the
parameters go into one file, replaced atomically.  A rerun restores both;
the iterator's ``set_state`` writes the epoch and the ids taken so far to
the job's ``resume`` file, and the job delivers exactly the rest of that
epoch, then the later ones in full, however far the killed run's workers
had read ahead.

    python3 examples/grain_resume.py /mnt/imagenet sweep-1 --epochs 3 \\
        --workers 2
    # killed (kill -9 of the training process and its workers), then the
    # same command again

``--log FILE`` appends a JSON line per step (the epoch and the ids trained
on), per checkpoint and for the checkpoint a rerun resumed from (the tests
read it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import grain

import joaderfs
from jax_model import init_params, load, save, train_step
from recipe_log import json_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mount", help="the joaderfs mount point")
    parser.add_argument("job_id", help="the job's id (the same for a rerun)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=64,
                        help="the images' output size")
    parser.add_argument("--workers", type=int, default=0,
                        help="mp_prefetch worker processes (0: none)")
    parser.add_argument("--checkpoint", default=None,
                        help="the checkpoint file (default: "
                             "./<job_id>.ckpt.npz)")
    parser.add_argument("--checkpoint-every", type=int, default=100,
                        help="steps between checkpoints")
    parser.add_argument("--log", default=None, help="a JSON-lines log")
    args = parser.parse_args()
    log = json_lines(args.log)

    # The same spec again on a rerun returns the existing job.
    job = joaderfs.make_job(args.mount, args.job_id,
                            {"size": args.size, "epochs": args.epochs})
    classes = joaderfs.dataset_info(args.mount)["classes"]
    dataset = joaderfs.grain_dataset(job, batch_size=args.batch_size,
                                     epochs=args.epochs)
    if args.workers:
        dataset = dataset.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=args.workers))
    iterator = iter(dataset)
    params = init_params(classes)
    checkpoint = Path(args.checkpoint or f"{args.job_id}.ckpt.npz")
    if checkpoint.exists():
        params, iterator_state = load(checkpoint)
        iterator.set_state(iterator_state)  # resume: before the first next
        log(resumed=iterator_state.get("epoch"),
            consumed=len(iterator_state.get("consumed", [])))

    epoch, taken = None, 0  # for the log: the ids of the epoch trained on
    try:
        for step, batch in enumerate(iterator, 1):
            params = train_step(params, batch["image"], batch["label"])
            if int(batch["epoch"]) != epoch:
                epoch, taken = int(batch["epoch"]), 0
            taken += len(batch["id"])
            log(epoch=epoch, ids=batch["id"].tolist())
            if step % args.checkpoint_every == 0:
                save(checkpoint, params, iterator.get_state())
                log(checkpoint=epoch, consumed=taken)
    finally:
        iterator.close()  # the worker processes


if __name__ == "__main__":
    main()
