#include "loader/augment.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/random.h"

namespace joaderfs {
namespace {

// Separate streams for the crop and the flip, so that how many tries a crop
// takes never changes the flip.
constexpr uint64_t kCropStream = 1;
constexpr uint64_t kFlipStream = 2;

uint64_t StreamKey(uint64_t seed, uint64_t epoch, uint64_t id, uint64_t stream) {
  return MixSeed(MixSeed(MixSeed(seed, epoch), id), stream);
}

// Python's round(): halves to even, as std::nearbyint does in the default
// rounding mode.
int64_t RoundHalfEven(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

uint64_t AugmentRandom::Next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double AugmentRandom::Uniform(double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(Next() >> 11) * 0x1.0p-53);
}

uint64_t AugmentRandom::Below(uint64_t n) {
  // Multiply-shift: the bias is under n / 2^64, far below anything a test sees.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
}

PixelBox RandomResizedCropBox(uint32_t width, uint32_t height, const AugmentSpec& spec,
                              AugmentRandom* random) {
  const double area = static_cast<double>(width) * height;
  const double log_ratio_min = std::log(spec.ratio_min);
  const double log_ratio_max = std::log(spec.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * random->Uniform(spec.scale_min, spec.scale_max);
    const double aspect = std::exp(random->Uniform(log_ratio_min, log_ratio_max));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      PixelBox box;
      box.width = static_cast<uint32_t>(w);
      box.height = static_cast<uint32_t>(h);
      box.top = static_cast<uint32_t>(random->Below(height - box.height + 1));
      box.left = static_cast<uint32_t>(random->Below(width - box.width + 1));
      return box;
    }
  }
  // Fallback: a centre crop at the nearest allowed ratio.
  PixelBox box{0, 0, width, height};
  const double in_ratio = static_cast<double>(width) / height;
  if (in_ratio < spec.ratio_min) {
    box.height = static_cast<uint32_t>(
        std::clamp<int64_t>(RoundHalfEven(width / spec.ratio_min), 1, height));
  } else if (in_ratio > spec.ratio_max) {
    box.width = static_cast<uint32_t>(
        std::clamp<int64_t>(RoundHalfEven(height * spec.ratio_max), 1, width));
  }
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

Augmentation ChooseAugmentation(const AugmentSpec& spec, uint64_t epoch, uint64_t id,
                                uint32_t width, uint32_t height) {
  Augmentation a;
  if (spec.crop == AugmentSpec::Crop::kRandom) {
    AugmentRandom random(StreamKey(spec.seed, epoch, id, kCropStream));
    a.box = RandomResizedCropBox(width, height, spec, &random);
  }
  if (spec.flip > 0) {
    AugmentRandom random(StreamKey(spec.seed, epoch, id, kFlipStream));
    a.flipped = random.Uniform(0, 1) < spec.flip;
  }
  return a;
}

SamplePtr RenderDelivery(const SamplePtr& base, const AugmentSpec& spec, uint32_t size,
                         uint64_t epoch, uint64_t id,
                         std::shared_ptr<std::atomic<uint64_t>> live_bytes) {
  const Augmentation a = ChooseAugmentation(spec, epoch, id, base->width, base->height);
  const bool random_crop = spec.crop == AugmentSpec::Crop::kRandom;
  if (size == 0 && !random_crop && !a.flipped) return base;
  auto out = std::make_shared<DecodedSample>();
  out->channels = 3;
  if (random_crop) {
    out->width = size > 0 ? size : a.box.width;
    out->height = size > 0 ? size : a.box.height;
  } else if (size > 0) {
    const ResizeCrop plan = PlanResizeCrop(base->width, base->height, size);
    out->width = plan.width;
    out->height = plan.height;
  } else {
    out->width = base->width;
    out->height = base->height;
  }
  const uint64_t bytes = out->bytes();
  if (live_bytes) {
    *live_bytes += bytes;
    out->pixels = std::shared_ptr<uint8_t>(new uint8_t[bytes], [live_bytes, bytes](uint8_t* p) {
      delete[] p;
      *live_bytes -= bytes;
    });
  } else {
    out->pixels = std::shared_ptr<uint8_t>(new uint8_t[bytes], std::default_delete<uint8_t[]>());
  }
  if (random_crop) {
    ResampleBox(base->pixels.get(), base->width, a.box, out->width, out->height, out->pixels.get(),
                a.flipped);
    // The record holds each coordinate in 16 bits: wider pictures (only
    // base=0 ones can be) leave the box unrecorded.
    if (std::max(base->width, base->height) <= 0xffff) {
      out->record_flags = kRecordCropBox;
      out->record_box = uint64_t{a.box.left} | uint64_t{a.box.top} << 16 |
                        uint64_t{a.box.width} << 32 | uint64_t{a.box.height} << 48;
    }
  } else if (size > 0) {
    ResampleRgb(base->pixels.get(), base->width, base->height,
                PlanResizeCrop(base->width, base->height, size), out->pixels.get(), a.flipped);
  } else {
    ResampleBox(base->pixels.get(), base->width, PixelBox{0, 0, base->width, base->height},
                base->width, base->height, out->pixels.get(), true);
  }
  if (a.flipped) out->record_flags |= kRecordFlipped;
  return out;
}

}  // namespace joaderfs
