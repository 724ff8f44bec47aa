// Lanes: requests to the cache, render dispatch, landing loads, and saving
// hand-outs (jobs/lanes.h).

#include "jobs/lanes.h"

namespace joaderfs {

void Lanes::RequestPosition(Lane* lane, uint64_t position, Actions* actions) {
  if (lane->released) return;  // requested again when a reader comes back
  lane->positions->MarkRequested(position);
  const SampleId id = lane->positions->IdAt(position);
  const JobSpec& spec = lane->job->spec;
  const bool render = spec.renders();
  shared_renders_->Hold(id, lane->share_key);
  actions->Add([this, id, render, augment = spec.augment, size = spec.size, serial = lane->serial,
                epoch = lane->epoch(), position] {
    cache_->AcquireWithTier(id, [=, this](const SamplePtr& base, Tier tier) {
      if (!render || !base) {
        OnLoaded(serial, epoch, position, base, tier);
        return;
      }
      // A decode's callback runs on the loader thread that decoded it:
      // render there. A hit's runs on whichever thread planned, maybe a
      // reader's FUSE thread, where rendering would serialise that reader:
      // hand it to the loader threads ahead of queued decodes.
      if (LoaderPool::OnWorkerThread()) {
        Render(augment, size, serial, epoch, position, id, base, tier);
      } else {
        pool_->SubmitUrgent(
            [=, this] { Render(augment, size, serial, epoch, position, id, base, tier); });
      }
    });
  });
}

void Lanes::Render(const AugmentSpec& augment, uint32_t size, uint64_t serial, uint64_t epoch,
                   uint64_t position, SampleId id, const SamplePtr& base, Tier tier) {
  OnLoaded(serial, epoch, position,
           shared_renders_->Render(base, augment, size, epoch, id, rendered_bytes_), tier);
}

void Lanes::ReleaseIds(const Lane& lane, std::vector<SampleId> ids, Actions* actions) {
  if (ids.empty()) return;
  actions->Add([this, key = lane.share_key, ids = std::move(ids)] {
    for (SampleId id : ids) {
      cache_->Release(id);
      shared_renders_->Drop(id, key);
    }
  });
}

void Lanes::OnLoaded(uint64_t serial, uint64_t epoch, uint64_t position, const SamplePtr& sample,
                     Tier tier) {
  ActionsLock lock(*owner_lock_);
  Actions* actions = lock.actions();
  auto it = by_serial_.find(serial);
  if (it == by_serial_.end()) return;
  Lane* lane = it->second;
  if (!lane->positions || !lane->positions->OnLoaded(epoch, position, sample, tier)) return;
  lane->group->Landed(lane->handle);  // the cache's figures count it now
  if (!sample) {
    ++lane->epoch_counts.skipped;
    ++lane->total_counts.skipped;
    for (Reader* r : lane->readers) {
      if (r->epoch == epoch) ++r->skipped;  // PadSkipped
    }
    AfterDone(lane, actions);
  }
  ServeWaiters(lane, actions);
}

void Lanes::SaveHandedOut(const Lane& lane, uint64_t epoch, std::vector<SampleId> handed,
                          Actions* actions) {
  if (!store_) return;
  actions->Add([this, name = lane.job->name, index = lane.index, epoch,
                handed = std::move(handed)] { store_->AddHandedOut(name, index, epoch, handed); });
}

}  // namespace joaderfs
