// Per-job augmentation of a shared base image (docs/design.md 2.3): every job
// receives its own crop, resize and flip of the one image the cache decoded
// at the mount's `base` resolution, so jobs share the decode whatever their
// size, crop and flip.
//
// The crop box and the flip of a delivery are a function of (seed, epoch,
// sample id) and the base image's size alone: they come from a
// counter-based generator keyed by those, never from timing or from the
// order in which samples are rendered. The random crop follows
// torchvision's RandomResizedCrop.get_params: uniform area fraction and
// log-ratio, ten tries, and the same fallback to a centre crop.
//
// Pure functions of their arguments; thread-safe.

#ifndef JOADERFS_LOADER_AUGMENT_H_
#define JOADERFS_LOADER_AUGMENT_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "loader/decoded_sample.h"
#include "loader/resample.h"

namespace joaderfs {

struct AugmentSpec {
  enum class Crop { kCenter, kRandom };
  Crop crop = Crop::kCenter;
  // RandomResizedCrop's scale (area fraction) and ratio (width / height).
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
  double flip = 0;  // probability of a horizontal flip
  uint64_t seed = 0;

  // False for the evaluation transform (centre crop, no flip): its records
  // keep flags and crop_box 0.
  bool augmented() const { return crop == Crop::kRandom || flip > 0; }
};

// Record header flags (records/record.h) of an augmented delivery.
inline constexpr uint32_t kRecordFlipped = 1u << 0;
inline constexpr uint32_t kRecordCropBox = 1u << 1;

// Uniform draws from a splitmix64 stream: a counter-based generator, cheap
// to start anywhere (one per delivery).
class AugmentRandom {
 public:
  explicit AugmentRandom(uint64_t key) : state_(key) {}
  uint64_t Next();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi);
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);

 private:
  uint64_t state_;
};

// torchvision's RandomResizedCrop.get_params on a `width` x `height` image.
PixelBox RandomResizedCropBox(uint32_t width, uint32_t height, const AugmentSpec& spec,
                              AugmentRandom* random);

struct Augmentation {
  PixelBox box;  // the random crop's box (unused for centre crops)
  bool flipped = false;
};

// The crop and flip of sample `id` in `epoch` for a job with `spec`, cut
// from a base image of `width` x `height`.
Augmentation ChooseAugmentation(const AugmentSpec& spec, uint64_t epoch, uint64_t id,
                                uint32_t width, uint32_t height);

// The delivery of `base` for a job: crop (centre: torchvision's Resize +
// CenterCrop; random: the chosen box), resize to `size` x `size`, flip.
// `size` 0 keeps the crop's own size, so a centre-crop, flip=0 job of size
// 0 gets `base` itself. Sets the record flags and box of augmented
// deliveries. A new picture's bytes are added to `live_bytes` (when given)
// until its pixels are freed. REQUIRES: base non-null with pixels.
SamplePtr RenderDelivery(const SamplePtr& base, const AugmentSpec& spec, uint32_t size,
                         uint64_t epoch, uint64_t id,
                         std::shared_ptr<std::atomic<uint64_t>> live_bytes = nullptr);

}  // namespace joaderfs

#endif  // JOADERFS_LOADER_AUGMENT_H_
