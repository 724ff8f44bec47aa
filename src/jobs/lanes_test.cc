// Lanes driven directly, without JobManager (jobs/lanes.h): its epochs,
// serving, stall figures and removal over a real catalog, cache, loader
// pool and planning group; the parts it owns (UnreadAllowance, epoch
// shards); and the ActionsLock rule that actions run after the lock.

#include "jobs/lanes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pacing/rank_split.h"
#include "records/record.h"
#include "testing/test_util.h"

namespace joaderfs {
namespace {

using namespace std::chrono_literals;

::testing::Environment* const kDecoderEnvironment = testing::AddDecoderEnvironment("lanes_test");

constexpr uint32_t kOwner = 1000;
constexpr uint32_t kSize = 16;
constexpr uint64_t kRecord = kRecordHeaderSize + kSize * kSize * 3;

// --- ActionsLock.

// Whether another thread could take `mu` now.
template <typename M>
bool FreeElsewhere(M& mu) {
  return std::async(std::launch::async,
                    [&mu] {
                      if (!mu.try_lock()) return false;
                      mu.unlock();
                      return true;
                    })
      .get();
}

TEST(ActionsLock, ActionsRunInOrderAfterTheLockIsDropped) {
  RankedMutex<LockRank::kJobManager> mu;
  std::vector<int> ran;
  {
    ActionsLock lock(mu);
    lock.actions()->Add([&] {
      EXPECT_TRUE(FreeElsewhere(mu)) << "an action ran under the lock";
      ran.push_back(1);
    });
    lock.actions()->Add([&] { ran.push_back(2); });
    EXPECT_FALSE(FreeElsewhere(mu));
    EXPECT_TRUE(ran.empty()) << "actions wait for the end of the scope";
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  // An action may take the lock again (a cache callback re-enters Lanes).
  bool reentered = false;
  {
    ActionsLock lock(mu);
    lock.actions()->Add([&] {
      ActionsLock again(mu);
      reentered = true;
    });
  }
  EXPECT_TRUE(reentered);
}

// --- UnreadAllowance.

TEST(UnreadAllowance, HoldsBackAtTheLimitAndPlansAgainBelowIt) {
  UnreadAllowance allowance(UnreadLimit{1000, false});
  PlanGroup a(PlanGroupOptions{}), b(PlanGroupOptions{});
  int one = 0, two = 0;  // streams
  const UnreadAllowance::Asker in_a{&one, &a, false}, in_b{&two, &b, false};
  EXPECT_TRUE(allowance.LetIn(kOwner, 600, in_a));
  EXPECT_TRUE(allowance.LetIn(kOwner, 600, in_a)) << "let in while below the allowance";
  EXPECT_EQ(allowance.Bytes(kOwner), 1200u);
  EXPECT_FALSE(allowance.LetIn(kOwner, 600, in_a));
  EXPECT_FALSE(allowance.LetIn(kOwner, 600, in_b));
  EXPECT_FALSE(allowance.LetIn(kOwner, 600, in_a));
  EXPECT_EQ(allowance.Bytes(kOwner), 1200u) << "a refusal charges nothing";
  EXPECT_TRUE(allowance.Add(kOwner, -100).empty()) << "still at 1100: nobody plans again";
  EXPECT_EQ(allowance.Add(kOwner, -200), (std::set<PlanGroup*>{&a, &b}));
  EXPECT_TRUE(allowance.Add(kOwner, -100).empty()) << "each group is given back once";
  EXPECT_EQ(allowance.Bytes(kOwner), 800u);
  EXPECT_EQ(allowance.Bytes(kOwner + 1), 0u) << "by uid";
  EXPECT_TRUE(allowance.Add(kOwner, -800).empty());
  EXPECT_EQ(allowance.Bytes(kOwner), 0u);
}

// The room reads free goes to the starved streams (a reader, nothing in
// flight) in the order they were turned away, before any stream plans
// further ahead; a stream that stops waiting gives its turn to the next.
TEST(UnreadAllowance, StarvedStreamsTakeTurns) {
  UnreadAllowance allowance(UnreadLimit{1000, false});
  PlanGroup g(PlanGroupOptions{});
  int ahead = 0, first = 0, second = 0;  // streams
  const UnreadAllowance::Asker planning_ahead{&ahead, &g, false}, first_starved{&first, &g, true},
      second_starved{&second, &g, true};
  EXPECT_TRUE(allowance.LetIn(kOwner, 1000, planning_ahead));
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, first_starved));
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, second_starved));
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, first_starved)) << "asking again keeps its place";
  EXPECT_EQ(allowance.Starved(kOwner), 2u);
  EXPECT_EQ(allowance.Add(kOwner, -200), std::set<PlanGroup*>{&g});
  EXPECT_FALSE(allowance.LetIn(kOwner, 100, planning_ahead)) << "room is set aside for the starved";
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, second_starved)) << "its turn comes after first's";
  EXPECT_TRUE(allowance.LetIn(kOwner, 300, first_starved));
  EXPECT_EQ(allowance.Bytes(kOwner), 1100u);
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, second_starved));
  EXPECT_EQ(allowance.Add(kOwner, -400), std::set<PlanGroup*>{&g});
  EXPECT_TRUE(allowance.LetIn(kOwner, 300, second_starved)) << "its turn";
  EXPECT_EQ(allowance.Starved(kOwner), 0u);
  EXPECT_EQ(allowance.Bytes(kOwner), 1000u);

  // A starved stream that stops waiting (its reader closed) leaves the
  // queue and gives its turn to the next.
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, first_starved));
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, second_starved));
  EXPECT_EQ(allowance.Add(kOwner, -100), std::set<PlanGroup*>{&g});
  EXPECT_FALSE(allowance.LetIn(kOwner, 300, second_starved));
  EXPECT_EQ(allowance.Forget(kOwner, &first), std::set<PlanGroup*>{&g});
  EXPECT_TRUE(allowance.LetIn(kOwner, 300, second_starved));
  EXPECT_EQ(allowance.Starved(kOwner), 0u);

  // A charge given back twice stops at zero instead of wrapping round to
  // a figure that would hold the owner for good.
  EXPECT_TRUE(allowance.Add(kOwner, -5000).empty());
  EXPECT_EQ(allowance.Bytes(kOwner), 0u);
  EXPECT_TRUE(allowance.LetIn(kOwner, 300, planning_ahead));
}

TEST(UnreadAllowance, RootIsExemptUnlessLimited) {
  EXPECT_FALSE(UnreadAllowance(UnreadLimit{1000, false}).Limited(0));
  EXPECT_TRUE(UnreadAllowance(UnreadLimit{1000, false}).Limited(kOwner));
  EXPECT_TRUE(UnreadAllowance(UnreadLimit{1000, true}).Limited(0));
}

// --- Epoch shards (jobs/epoch_shards.h).

Job RankedJob(uint32_t ranks, uint64_t samples) {
  Job job;
  job.name = "r";
  job.spec.ranks = ranks;
  job.subset.addRange(0, samples);
  return job;
}

TEST(EpochShards, ShardsAreMadeOnceAndTwoEpochsKept) {
  Job job = RankedJob(3, 30);
  std::packaged_task<std::vector<Roaring>()> split;
  auto first = ShardsOf(&job, 5, &split);
  ASSERT_TRUE(split.valid()) << "the first asker makes them";
  std::packaged_task<std::vector<Roaring>()> again;
  auto second = ShardsOf(&job, 5, &again);
  EXPECT_FALSE(again.valid()) << "a second asker waits for the first's";
  split();
  EXPECT_EQ(first.get(), SplitEpoch(job.subset, 5, 3, false));
  EXPECT_EQ(second.get(), first.get());
  for (uint64_t epoch : {6, 7}) {
    std::packaged_task<std::vector<Roaring>()> task;
    ShardsOf(&job, epoch, &task);
    task();
  }
  EXPECT_EQ(job.splits.size(), 2u);
  EXPECT_FALSE(job.splits.contains(5)) << "the oldest goes";
}

TEST(EpochShards, RanksReadTheirShareOfAnElasticResume) {
  Job job = RankedJob(2, 20);
  job.lanes.push_back(std::make_unique<Lane>());
  job.lanes.push_back(std::make_unique<Lane>());
  job.lanes[1]->index = 1;
  Roaring consumed;
  consumed.addRange(0, 6);
  ElasticSplit split = PrepareElastic(job, 4, consumed);
  split.Split();
  job.elastic = ElasticResume{4, split.consumed, split.shares};
  Roaring read;
  for (const auto& lane : job.lanes) {
    const Roaring ids = EpochSubset(&job, *lane, 4);
    EXPECT_EQ(ids.cardinality(), 7u);
    EXPECT_EQ(ids & consumed, Roaring());
    read |= ids;
  }
  EXPECT_EQ(read.cardinality(), 14u) << "the rest of the epoch, split";
  EXPECT_EQ(EpochSubset(&job, *job.lanes[0], 5), SplitEpoch(job.subset, 5, 2, false)[0])
      << "other epochs read their shard";

  // Writes of the epoch add up until a rank reads it.
  Roaring more;
  more.addRange(6, 8);
  more.add(100);  // outside the subset
  EXPECT_EQ(ElasticConsumed(job, 4, more).cardinality(), 8u);
  EXPECT_EQ(ElasticConsumed(job, 3, more).cardinality(), 2u);
  job.elastic->read = true;
  EXPECT_EQ(ElasticConsumed(job, 4, more).cardinality(), 2u);
}

// --- Lanes over the real thing.

// Three classes of four 24x20 JPEGs.
class LanesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteImageFolder(dir_.path(), {4, 4, 4}, [](const std::string& path, int index) {
      testing::WriteNoiseImage(path, 24, 20, static_cast<uint32_t>(index + 1));
    });
    const Status s = Catalog::Open(dir_.path(), &catalog_);
    ASSERT_TRUE(s.ok()) << s.message();
    group_ = std::make_unique<PlanGroup>(PlanGroupOptions{});
    pool_ = std::make_unique<LoaderPool>(2);
    cache_ = std::make_unique<SampleCache>(catalog_.get(), pool_.get(), nullptr, group_.get(),
                                           kSize, 64 << 20);
    renders_ = std::make_unique<SharedRenders>(group_.get(),
                                               SharedRenders::KeepBytesFor(cache_->budget()));
    lanes_ = std::make_unique<Lanes>(&mu_, catalog_.get(), cache_.get(), pool_.get(), group_.get(),
                                     renders_.get(), nullptr);
    pool_->Start();
  }
  void TearDown() override {
    cache_->StopReads();
    pool_.reset();
    {
      ActionsLock lock(mu_);
      for (auto& job : jobs_) {
        for (const auto& lane : job->lanes) lanes_->Remove(lane.get(), lock.actions());
      }
    }
    readers_.clear();
    lanes_.reset();
    renders_.reset();
    cache_.reset();
    group_.reset();
  }

  Job* MakeJob(const std::string& spec) {
    auto job = std::make_unique<Job>();
    job->name = "j" + std::to_string(jobs_.size());
    job->uid = kOwner;
    JobSpec base;
    base.size = kSize;
    const Status s = ParseJobSpec(spec, *catalog_, base, &job->spec);
    EXPECT_TRUE(s.ok()) << s.message();
    job->subset = ResolveSubset(job->spec.subset, *catalog_);
    ActionsLock lock(mu_);
    lanes_->Make(job.get());
    jobs_.push_back(std::move(job));
    return jobs_.back().get();
  }

  Reader* OpenReader(Lane* lane) {
    auto reader = std::make_unique<Reader>();
    ActionsLock lock(mu_);
    reader->id = readers_.size() + 1;
    reader->lane = lane;
    reader->owner = lane->job->uid;
    reader->epoch = lane->epoch();
    lane->readers.insert(reader.get());
    readers_.push_back(std::move(reader));
    return readers_.back().get();
  }

  struct Reply {
    Status status;
    std::string bytes;
  };

  // A read as JobManager::Read issues it.
  std::future<Reply> ReadAsync(Reader* r, size_t max_bytes) {
    auto promise = std::make_shared<std::promise<Reply>>();
    auto future = promise->get_future();
    ActionsLock lock(mu_);
    Actions* actions = lock.actions();
    r->max_bytes = max_bytes;
    r->reply = [promise](const Status& s, std::span<const iovec> data) {
      Reply reply{s, {}};
      for (const iovec& v : data)
        reply.bytes.append(static_cast<const char*>(v.iov_base), v.iov_len);
      promise->set_value(std::move(reply));
    };
    r->waiting = true;
    if (r->pending.empty() && r->lane && !lanes_->ReaderAtEof(r)) lanes_->Wake(r->lane, actions);
    if (!lanes_->TryServe(r, actions)) {
      lanes_->BeginStall(r);
      r->lane->waiting.push_back(r);
    }
    if (r->lane) lanes_->ServeWaiters(r->lane, actions);
    return future;
  }

  // The sample ids of the records read up to the end of the reader's epoch.
  std::vector<SampleId> ReadEpoch(Reader* r) {
    std::vector<SampleId> ids;
    for (int i = 0; i < 1000; ++i) {
      auto f = ReadAsync(r, kRecord);
      if (f.wait_for(10s) != std::future_status::ready) {
        ADD_FAILURE() << "a read got no reply";
        break;
      }
      const Reply reply = f.get();
      EXPECT_TRUE(reply.status.ok()) << reply.status.message();
      if (reply.bytes.empty()) break;
      EXPECT_EQ(reply.bytes.size(), kRecord);
      const auto h = DecodeRecordHeader(reinterpret_cast<const uint8_t*>(reply.bytes.data()));
      if (!h) {
        ADD_FAILURE() << "bad record";
        break;
      }
      EXPECT_EQ(h->epoch, r->epoch);
      EXPECT_EQ(h->label, catalog_->label(static_cast<SampleId>(h->sample_id)));
      ids.push_back(static_cast<SampleId>(h->sample_id));
    }
    return ids;
  }

  JobStatus StatusOf(const Lane& lane) {
    ActionsLock lock(mu_);
    return lanes_->StatusOf(lane);
  }

  testing::TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<PlanGroup> group_;
  std::unique_ptr<LoaderPool> pool_;
  std::unique_ptr<SampleCache> cache_;
  Lanes::OwnerLock mu_;  // what JobManager's lock is to its Lanes
  std::unique_ptr<SharedRenders> renders_;
  std::unique_ptr<Lanes> lanes_;
  std::vector<std::unique_ptr<Job>> jobs_;
  std::vector<std::unique_ptr<Reader>> readers_;
};

TEST_F(LanesTest, EachEpochHandsOutItsSubsetOnceThenEof) {
  Job* job = MakeJob("subset=classes:0-1 epochs=2 window=3");
  Lane* lane = job->lanes[0].get();
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE(epoch);
    Reader* r = OpenReader(lane);
    std::vector<SampleId> ids = ReadEpoch(r);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, testing::Iota(0, 7));
    const JobStatus st = StatusOf(*lane);
    EXPECT_EQ(st.epochs_completed, epoch + 1);
    EXPECT_EQ(st.this_epoch.delivered, 8u);
    EXPECT_EQ(st.total.delivered, 8 * (epoch + 1));
    EXPECT_EQ(st.this_epoch.ram_hits + st.this_epoch.disk_hits + st.this_epoch.decodes, 8u);
    EXPECT_EQ(st.remaining, 0u);
  }
  ActionsLock lock(mu_);
  EXPECT_EQ(lanes_->delivered(), 16u);
  EXPECT_TRUE(Lanes::EpochsOver(*lane));
  EXPECT_EQ(lanes_->Unhanded(*lane, nullptr), 0u);
  EXPECT_EQ(cache_->Stats().pinned_bytes, 0u) << "every pin is given back";
}

// A read that waits stalls its lane and the mount until answered; removing
// the lane fails it with Gone and gives back its pins.
TEST_F(LanesTest, RemoveFailsWaitingReadsAndGivesBackPins) {
  Job* job = MakeJob("subset=classes:0 window=2");
  Lane* lane = job->lanes[0].get();
  Reader* r = OpenReader(lane);
  std::future<Reply> read;
  {
    testing::PoolGate gate(pool_.get(), 2);  // no decode runs
    read = ReadAsync(r, kRecord);
    std::this_thread::sleep_for(50ms);
    ASSERT_EQ(read.wait_for(0s), std::future_status::timeout);
    {
      ActionsLock lock(mu_);
      EXPECT_GE(lanes_->StallSeconds(), 0.04);
      EXPECT_GE(lanes_->StatusOf(*lane).total.stall_seconds, 0.04);
      lanes_->Remove(lane, lock.actions());
      EXPECT_EQ(r->lane, nullptr);
    }
    ASSERT_EQ(read.wait_for(1s), std::future_status::ready);
    EXPECT_EQ(read.get().status.code(), Status::Code::kGone);
  }
  // The loads requested before the removal land on no lane.
  EXPECT_TRUE(testing::Eventually([&] { return cache_->Stats().loading == 0; }));
  EXPECT_EQ(cache_->Stats().pinned_bytes, 0u);
  ActionsLock lock(mu_);
  EXPECT_EQ(lanes_->delivered(), 0u);
  EXPECT_GE(lanes_->StallSeconds(), 0.04) << "a removed lane's stall stays the mount's";
  jobs_.clear();  // removed already
}

// A resume skips what was consumed; a fully consumed epoch moves on to
// the next one.
TEST_F(LanesTest, ResumeSkipsTheConsumedIds) {
  Job* job = MakeJob("subset=classes:0 epochs=3");
  Lane* lane = job->lanes[0].get();
  Roaring consumed;
  consumed.addRange(0, 3);
  {
    ActionsLock lock(mu_);
    lanes_->SetResume(lane, 1, consumed);
    EXPECT_EQ(lane->epoch(), 1u);
    EXPECT_EQ(lanes_->Unhanded(*lane, nullptr), 1u);
  }
  Reader* r = OpenReader(lane);
  EXPECT_EQ(ReadEpoch(r), std::vector<SampleId>{3});
  Roaring all;
  all.addRange(0, 4);
  {
    ActionsLock lock(mu_);
    lanes_->Reset(lane, lock.actions());
    lanes_->SetResume(lane, 1, all);
    EXPECT_EQ(lane->epoch(), 2u) << "nothing of epoch 1 is left";
    EXPECT_EQ(lanes_->Unhanded(*lane, nullptr), 4u);
  }
}

// Queued bytes count against the job's owner, not against root.
TEST_F(LanesTest, QueuedBytesCountAgainstTheOwner) {
  Job* job = MakeJob("subset=classes:0");
  Reader* r = OpenReader(job->lanes[0].get());
  ActionsLock lock(mu_);
  lanes_->NoteQueued(*r, 5000, lock.actions());
  EXPECT_EQ(lanes_->UnreadBytes(kOwner), 5000u);
  lanes_->NoteQueued(*r, -5000, lock.actions());
  EXPECT_EQ(lanes_->UnreadBytes(kOwner), 0u);
  r->owner = 0;
  lanes_->NoteQueued(*r, 5000, lock.actions());
  EXPECT_EQ(lanes_->UnreadBytes(0), 0u);
}

}  // namespace
}  // namespace joaderfs
