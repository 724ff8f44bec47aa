"""A jitted JAX training loop that survives being killed and goes on in
the middle of its epoch, every sample trained on once per epoch.

``joaderfs.StreamState`` records the ids of the batches the loop has
received (not those ``jax_batches`` had read ahead); every
``--checkpoint-every`` steps and at each epoch's end a checkpoint holds the
parameters and that state, in one file replaced atomically.  A rerun loads
both; ``load_state_dict`` writes the epoch and those ids to the job's
``resume`` file, and the job delivers exactly the rest of that epoch, then
the later ones in full.  The daemon does not restart an epoch by itself:
without the resume the rerun would lose what the killed run had been
handed but not trained on.

    python3 examples/jax_resume.py /mnt/imagenet sweep-1 --epochs 3
    # killed (kill -9, a preemption), then the same command again

``--log FILE`` appends a JSON line per step (the epoch and the ids trained
on), per checkpoint and for the checkpoint a rerun resumed from (the tests
read it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

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
    params = init_params(classes)
    state = joaderfs.StreamState(job)
    checkpoint = Path(args.checkpoint or f"{args.job_id}.ckpt.npz")
    if checkpoint.exists():
        params, data = load(checkpoint)
        state.load_state_dict(data)  # resume: the rest of its epoch
        log(resumed=state.epoch, consumed=len(state.consumed))

    for _ in range(state.epoch or 0, args.epochs):
        steps = 0
        # drop_last=False: every sample is trained on (a short last batch
        # compiles the step once more).
        batches = joaderfs.jax_batches(job, args.batch_size, drop_last=False)
        for images, labels, ids in state.track(batches):
            params = train_step(params, images, labels)
            steps += 1
            log(epoch=state.epoch, ids=ids.tolist())
            if steps % args.checkpoint_every == 0:
                save(checkpoint, params, state.state_dict())
                log(checkpoint=state.epoch, consumed=len(state.consumed))
        # The pass is over: the state is of the next epoch, none of it read.
        save(checkpoint, params, state.state_dict())
        log(checkpoint=state.epoch, consumed=0)


if __name__ == "__main__":
    main()
