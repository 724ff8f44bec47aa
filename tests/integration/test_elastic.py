"""Issue 19, part 3: resume across a change of ranks (elastic), through the
Python client and torch.distributed (gloo, 127.0.0.1) on a daemonized
mount (docs/design.md 2.7, docs/ranks.md).

- a job of 4 ranks (4 processes, DataLoaders with two workers) reads epoch
  0, then part of epoch 1; each rank checkpoints after its third batch
  through StreamState.elastic_state_dict() (all_gather_object), reads two
  more batches and is killed with SIGKILL;
- from that one checkpoint, a job of 2 ranks and (separately) a job of 3
  ranks, each rank its own process, load the state (resume without rank=)
  and read: the rest of epoch 1 comes exactly once across the new ranks
  (padding apart, as DistributedSampler pads), in equal shares, nothing the
  checkpoint holds comes again, and epoch 2 is a full epoch split as for a
  fresh job of that many ranks.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import unittest

import harness
import joaderfs
from harness import DatasetMixin, JoaderTestCase, read_epoch, read_exact

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")
SIZE = 16
BATCH = 3
SUBSET = 101  # range:0-100: 26 per rank of 4 (3 padded)
RESUMED_EPOCH = 1
RECORD = harness.record_size(SIZE * SIZE * 3)

# Common to both phases: the process group, and a DataLoader of the job
# whose rank (and, for a resumed epoch, length) comes from the daemon.
PRELUDE = """
import datetime, json, os, signal, sys
import torch, torch.distributed as dist
from torch.utils.data import DataLoader
from joaderfs import JobDataset, StreamState

job, init, rank, world, out = sys.argv[1:6]
rank, world = int(rank), int(world)
dist.init_process_group("gloo", init_method=init, rank=rank,
                        world_size=world,
                        timeout=datetime.timedelta(seconds=60))
# Persistent workers, as the user guide has them: forked once, before any
# collective runs (a fork of a process whose gloo threads are busy can
# deadlock the child, test_ranks_torch.py).
loader = DataLoader(JobDataset(job, batch_size=%d), batch_size=None,
                    num_workers=2, timeout=60, persistent_workers=True)
state = StreamState(job)  # rank= from the process group
""" % BATCH

# 4 ranks: epoch 0 whole, then 3 batches of epoch 1, a checkpoint of the
# union, 2 batches more (consumed, not checkpointed), kill -9.
STOPPED = PRELUDE + textwrap.dedent("""
    for _ in state.track(loader):
        pass
    assert state.epoch == 1, state.epoch
    for step, (images, labels, ids) in enumerate(state.track(loader)):
        if step == 2:
            mine = state.state_dict()
            data = state.elastic_state_dict()  # a collective
            if rank == 0:
                json.dump(data, open(out + ".ckpt", "w"))
            json.dump(mine, open(out, "w"))
            dist.barrier()  # the checkpoint is written before any dies
        if step == 4:
            os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit("the epoch ended before the crash")
""")

# W' ranks: load the checkpoint, read the rest of epoch 1, then epoch 2.
RESUMED = PRELUDE + textwrap.dedent("""
    checkpoint = sys.argv[6]
    state.load_state_dict(json.load(open(checkpoint)))
    epochs = []
    for _ in range(2):
        got = [i for _, _, ids in loader for i in ids.tolist()]
        status = json.loads(open(os.path.join(job, "status")).read())
        epochs.append({"ids": got,
                       "epoch": status["ranks"][rank]["epoch"]})
        # Every rank runs the same number of steps: a collective per
        # epoch that would hang (then time out) if one had more.
        dist.barrier()
    json.dump(epochs, open(out, "w"))
    dist.destroy_process_group()
""")


def load_json(path):
    with open(path) as f:
        return json.load(f)


class ElasticResumeTest(DatasetMixin, JoaderTestCase):
    # Enough samples that a DataLoader's second worker opens its stream
    # before the first has emptied the epoch.
    LAYOUT = {"c%d" % c: ["i%02d.jpg" % i for i in range(30)] for c in range(4)}

    def ranks(self, script, job, world, extra=()):
        """Runs `world` processes of `script` over `job`, one per rank, in
        one gloo group; returns (exit codes, outputs, their json paths)."""
        tmp = self.tempdir()
        init = "file://" + os.path.join(tmp, "rendezvous")
        outs = [os.path.join(tmp, "rank%d.json" % r) for r in range(world)]
        env = dict(os.environ, PYTHONPATH=os.path.abspath(PYTHON_DIR),
                   PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1",
                   GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
        procs = [subprocess.Popen(
            [sys.executable, "-c", script, job, init, str(r), str(world),
             outs[r]] + list(extra), env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT) for r in range(world)]
        results = []
        try:
            for p in procs:
                out, _ = p.communicate(timeout=240)
                results.append((p.returncode, out.decode(errors="replace")))
        finally:
            for p in procs:  # a rank that hung, or the others of a failure
                if p.poll() is None:
                    p.kill()
                    p.wait()
        return results, outs

    def fresh_split(self, m, world, epoch):
        """What rank r of a fresh job of `world` ranks reads in `epoch`."""
        job = "fresh%d" % world
        m.mkjob(job, "ranks=%d subset=range:0-%d" % (world, SUBSET - 1))
        shares = []
        for r in range(world):
            for e in range(epoch + 1):
                got = [rec for rs in read_epoch(m.path("jobs", job, "next.%d" % r))
                       for rec in rs]
            self.assertEqual({rec.epoch for rec in got}, {epoch})
            shares.append(sorted(rec.id for rec in got))
        return shares

    def test_four_ranks_killed_then_resumed_on_two_and_on_three(self):
        m = self.mount(self.source, {"size": str(SIZE)})
        spec = "subset=range:0-%d" % (SUBSET - 1)
        m.mkjob("four", "ranks=4 " + spec)
        results, outs = self.ranks(STOPPED, m.path("jobs", "four"), 4)
        for code, out in results:
            self.assertEqual(code, -signal.SIGKILL, out)
        per_rank = [load_json(o) for o in outs]
        checkpoint = outs[0] + ".ckpt"
        saved = load_json(checkpoint)
        self.assertEqual(saved["epoch"], RESUMED_EPOCH)
        self.assertIsNone(saved["rank"])
        union = set()
        for r, state in enumerate(per_rank):
            self.assertEqual((state["epoch"], state["rank"]), (RESUMED_EPOCH, r))
            self.assertEqual(len(state["consumed"]), 3 * BATCH)
            union |= set(state["consumed"])
        self.assertEqual(saved["consumed"], sorted(union),
                         "the checkpoint holds the union of the ranks' ids")
        rest = set(range(SUBSET)) - union

        for world in (2, 3):
            with self.subTest(world=world):
                job = "resumed%d" % world
                m.mkjob(job, "ranks=%d %s" % (world, spec))
                results, outs = self.ranks(RESUMED, m.path("jobs", job), world,
                                           [checkpoint])
                for code, out in results:
                    self.assertEqual(code, 0, out)
                got = [load_json(o) for o in outs]
                share = -(-len(rest) // world)  # ceil: padded
                every = []
                for r in range(world):
                    ids = got[r][0]["ids"]
                    self.assertEqual(got[r][0]["epoch"], RESUMED_EPOCH)
                    self.assertEqual(len(ids), share, "rank %d: equal shares" % r)
                    self.assertEqual(len(set(ids)), len(ids), "an id twice in a rank")
                    every += ids
                self.assertFalse(set(every) & union, "a checkpointed id came again")
                self.assertEqual(set(every), rest, "the rest of the epoch, none missing")
                self.assertEqual(len(every) - len(rest), share * world - len(rest),
                                 "only DistributedSampler's padding twice")
                # The next epoch is whole, split as for any job of W' ranks.
                fresh = self.fresh_split(m, world, RESUMED_EPOCH + 1)
                for r in range(world):
                    self.assertEqual(got[r][1]["epoch"], RESUMED_EPOCH + 1)
                    self.assertEqual(sorted(got[r][1]["ids"]), fresh[r])

    def test_states_gathered_by_the_caller_with_drop_last(self):
        """Without torch: two ranks' state_dict()s merged by the caller
        (merge_states), loaded by every rank of a job of 3 with drop_last=1:
        floor(M/3) each, none twice, only M mod 3 of the rest left out."""
        m = self.mount(self.source, {"size": str(SIZE)})
        spec = "subset=range:0-%d" % (SUBSET - 1)
        m.mkjob("two", "ranks=2 " + spec)
        states = []
        for r in range(2):
            fd = os.open(m.path("jobs", "two", "next.%d" % r), os.O_RDONLY)
            try:
                # One record a read: the daemon hands out exactly those.
                ids = [harness.parse_records(read_exact(fd, RECORD))[0].id
                       for _ in range(5 + 3 * r)]
            finally:
                os.close(fd)
            states.append({"epoch": 0, "rank": r, "consumed": ids})
        states.append({"epoch": None, "rank": 2, "consumed": []})  # read nothing
        merged = joaderfs.merge_states(states)
        union = set(states[0]["consumed"]) | set(states[1]["consumed"])
        self.assertEqual(merged, {"epoch": 0, "rank": None,
                                  "consumed": sorted(union)})
        with self.assertRaises(ValueError):
            joaderfs.merge_states([states[0], dict(states[1], epoch=1)])
        m.mkjob("three", "ranks=3 drop_last=1 " + spec)
        for r in range(3):  # every rank writes: the same ids add up
            joaderfs.StreamState(m.path("jobs", "three"), rank=r).load_state_dict(merged)
        rest = set(range(SUBSET)) - union
        every = []
        for r in range(3):
            got = [rec for rs in read_epoch(m.path("jobs", "three", "next.%d" % r))
                   for rec in rs]
            self.assertEqual({rec.epoch for rec in got}, {0})
            self.assertEqual(len(got), len(rest) // 3, "rank %d: floor(M/3)" % r)
            every += [rec.id for rec in got]
        self.assertEqual(len(set(every)), len(every), "an id twice")
        self.assertTrue(set(every) <= rest)
        self.assertEqual(len(rest - set(every)), len(rest) % 3)


if __name__ == "__main__":
    unittest.main()
