"""Issue 11, parts 2-3, with PyTorch: data-parallel training over next.R and
exact resume after a crash of the training process, through the Python
client (python/joaderfs) on a daemonized mount.

- torch.distributed with the gloo backend on CPU: W = 2 and 3 processes
  each read their next.R (the rank comes from the process group) through a
  DataLoader with two workers (from a forkserver: forking a process whose
  gloo threads run can deadlock a worker), one of them slow, and train a
  tiny DDP model for two epochs without Join, with an allreduce per batch:
  every rank runs ceil(N/B) steps per epoch (N per rank not a multiple of
  B), no collective times out, every rank gets ceil(S/W) samples per epoch
  and together they cover the subset;
- resume after kill -9 of the training process: a DataLoader with two
  workers, StreamState.track(), a checkpoint after the third batch, kill -9
  after the fifth; a new process loads the checkpoint and finishes the
  epoch: over the epoch every sample is trained on exactly once.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import unittest

import harness
from harness import DatasetMixin, JoaderTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
SIZE = 16  # tiny images: a linear model over 16*16*3 features
BATCH = 4
SUBSET = 101  # ids 0-100: 51 per rank of 2 and 34 per rank of 3, not 4k

DDP_SCRIPT = textwrap.dedent("""
    import datetime, json, os, sys, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, get_worker_info
    from joaderfs import JobDataset

    def slow_readv(fd, buffers, readv=os.readv):
        time.sleep(0.002)
        return readv(fd, buffers[:1])

    class UnevenWorkers(JobDataset):
        # One worker of each rank (not the same one on every rank) is slow,
        # and its read()s return a record's header or payload at a time:
        # it is inside a batch most of the time, as a worker is whose reads
        # get fewer records than a batch (the daemon hands out what is
        # ready).  Were the workers to read until EOF, both would likely
        # end the epoch with a short batch of their own: an extra step.
        def __init__(self, job, batch_size, slow_worker):
            super().__init__(job, batch_size=batch_size)  # rank= from the group
            self.slow_worker = slow_worker

        def __iter__(self):
            if get_worker_info().id == self.slow_worker:
                os.readv = slow_readv  # in this worker process only
            return super().__iter__()

    # At module level, not in a function: torch 1.13 deadlocks when DDP's
    # process group is destroyed with a function's locals.
    if __name__ == "__main__":
        job, init, rank, world, out = sys.argv[1:6]
        rank, world = int(rank), int(world)
        # A collective that cannot complete fails instead of hanging.
        dist.init_process_group("gloo", init_method=init, rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=30))
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(%d * %d * 3, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        # Workers come from a forkserver: a fork of this process, whose gloo
        # threads run, can deadlock the child (seen once in ~100 runs: a
        # worker stuck on a futex before it opened its stream).
        loader = DataLoader(UnevenWorkers(job, %d, rank %% 2), batch_size=None,
                            num_workers=2, timeout=60,
                            multiprocessing_context="forkserver")
        epochs = []
        for epoch in range(2):
            ids, batches = [], 0
            # No Join: every rank must run the same number of steps.
            for images, labels, batch_ids in loader:
                x = images.float().flatten(1) / 255
                loss = torch.nn.functional.cross_entropy(model(x), labels %% 4)
                opt.zero_grad()
                loss.backward()  # DDP's allreduce of the gradients
                opt.step()
                step = torch.ones(1)
                dist.all_reduce(step)
                assert step.item() == world, step
                ids += batch_ids.tolist()
                batches += 1
            counts = [None] * world
            dist.all_gather_object(counts, (len(ids), batches))
            epochs.append({"ids": ids, "counts": counts})
        dist.destroy_process_group()
        json.dump(epochs, open(out, "w"))
""" % (SIZE, SIZE, BATCH))

RESUME_SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    import torch
    from torch.utils.data import DataLoader
    from joaderfs import JobDataset, StreamState

    job, checkpoint, out, phase = sys.argv[1:5]
    model = torch.nn.Linear(%d * %d * 3, 4)
    loader = DataLoader(JobDataset(job, batch_size=2), batch_size=None,
                        num_workers=2)
    state = StreamState(job)
    trained = []
    if phase == "after":
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        state.load_state_dict(saved["data"])
        trained = saved["trained"]
    for i, (images, labels, ids) in enumerate(state.track(loader)):
        model(images.float().flatten(1)).sum().backward()
        trained += ids.tolist()
        if phase == "before" and i == 2:
            torch.save({"model": model.state_dict(),
                        "data": state.state_dict(), "trained": trained},
                       checkpoint)
        if phase == "before" and i == 4:
            os.kill(os.getpid(), signal.SIGKILL)  # the crash
    next_epoch = [i for _, _, ids in state.track(loader) for i in ids.tolist()]
    json.dump({"trained": trained, "next_epoch": next_epoch}, open(out, "w"))
""" % (SIZE, SIZE))


def load_json(path):
    with open(path) as f:
        return json.load(f)


class TorchRanksTest(DatasetMixin, JoaderTestCase):
    # Enough samples that a DataLoader's second worker opens its stream
    # before the first has emptied the epoch (a later open would start the
    # next epoch, docs/design.md 2.4).
    LAYOUT = {"c%d" % c: ["i%02d.jpg" % i for i in range(30)] for c in range(4)}

    def run_python(self, script, args):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(PYTHON_DIR),
                   PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
        # A file, not -c: forkserver workers import the main module.
        path = os.path.join(self.tempdir(), "script.py")
        with open(path, "w") as f:
            f.write(script)
        return subprocess.Popen([sys.executable, path] + args, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def finish(self, procs, timeout=240):
        outputs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AssertionError("a rank hung: no exit within %ds" % timeout)
            outputs.append((p.returncode, out.decode(errors="replace")))
        return outputs

    def test_ddp_gloo_ranks_train_without_hanging(self):
        m = self.mount(self.source, {"size": str(SIZE)})
        for world in (2, 3):
            with self.subTest(world=world):
                job = "ddp%d" % world
                m.mkjob(job, "ranks=%d epochs=2 subset=range:0-%d"
                        % (world, SUBSET - 1))
                tmp = self.tempdir()
                init = "file://" + os.path.join(tmp, "rendezvous")
                outs = [os.path.join(tmp, "rank%d.json" % r) for r in range(world)]
                procs = [self.run_python(DDP_SCRIPT, [m.path("jobs", job), init,
                                                      str(r), str(world), outs[r]])
                         for r in range(world)]
                for code, out in self.finish(procs):
                    self.assertEqual(code, 0, out)
                per_rank = -(-SUBSET // world)
                batches = -(-per_rank // BATCH)
                results = [load_json(o) for o in outs]
                for epoch in range(2):
                    every = []
                    for r in range(world):
                        ids = results[r][epoch]["ids"]
                        self.assertEqual(results[r][epoch]["counts"],
                                         [[per_rank, batches]] * world)
                        self.assertEqual(len(set(ids)), per_rank)
                        every += ids
                    self.assertEqual(set(every), set(range(SUBSET)))

    def test_resume_after_kill_9_trains_each_sample_once(self):
        m = self.mount(self.source, {"size": str(SIZE)})
        m.mkjob("train")
        tmp = self.tempdir()
        checkpoint = os.path.join(tmp, "checkpoint.pt")
        out = os.path.join(tmp, "out.json")
        job = m.path("jobs", "train")
        [(code, text)] = self.finish([self.run_python(
            RESUME_SCRIPT, [job, checkpoint, out, "before"])])
        self.assertEqual(code, -signal.SIGKILL, text)
        self.assertTrue(os.path.exists(checkpoint))
        [(code, text)] = self.finish([self.run_python(
            RESUME_SCRIPT, [job, checkpoint, out, "after"])])
        self.assertEqual(code, 0, text)
        result = load_json(out)
        self.assertEqual(sorted(result["trained"]), list(range(self.N)),
                         "each sample of the epoch trained on exactly once")
        self.assertEqual(sorted(result["next_epoch"]), list(range(self.N)))
        self.assertEqual(m.status("train")["epoch"], 1)


if __name__ == "__main__":
    unittest.main()
