// The job spec's keys (docs/design.md 2.3), the one list of them: the
// mount's /README prints it (fs/render.cc), and doc_tables_test holds
// docs/reference.md, joaderfs(8) and docs/design.md to it, key for key and
// default for default. ParseJobSpec (spec/spec.h) parses the values; spec_test
// checks that it takes every key here and that JobSpec::ToString() writes
// no other.
//
// Adding a key: a row below, its case in ParseJobSpec (and ToString() if
// the spec file shows it), and its entry in the spec tables of
// docs/reference.md and docs/design.md and the JOB SPEC section of man/joaderfs.8 with the
// same default: doc_tables_test names any document that lacks it.

#ifndef JOADERFS_SPEC_SPEC_KEYS_H_
#define JOADERFS_SPEC_SPEC_KEYS_H_

#include <string_view>

namespace joaderfs {

struct SpecKeyInfo {
  std::string_view name;
  std::string_view values;    // the grammar, as /README shows it after "name="
  std::string_view fallback;  // the default, in the words every document uses
  std::string_view help;      // /README's text, before "(default: ...)"
};

inline constexpr SpecKeyInfo kSpecKeys[] = {
    {"subset", "all | classes:A-B[,C-D...] | range:A-B | random:F:SEED", "all",
     "which samples: all, the labels A-B..., the ids A-B, or a fraction F of all ids "
     "chosen by SEED"},
    {"size", "N", "the mount's size",
     "shorter side resized to N, centre crop N x N; 0 resizes nothing: the image as the "
     "cache holds it (shorter side at least the mount's base; the original with base=0), "
     "or a random crop at its own size"},
    {"crop", "center | random | random:SMIN-SMAX:RMIN-RMAX", "center",
     "centre crop, or torchvision's RandomResizedCrop (scale 0.08-1, ratio 0.75-1.3333 "
     "unless given)"},
    {"flip", "P", "0", "horizontal flip with probability P"},
    {"seed", "N", "derived from the mount's seed and the job id",
     "the job's augmentation seed: a sample's crop and flip depend on (seed, epoch, id) "
     "alone"},
    {"group", "NAME", "none",
     "jobs on any daemon with the same group, seed and subset read in the same order, so "
     "that a cluster sharing a remote tier decodes each sample about once"},
    {"epochs", "N", "unlimited", "EOF for good after N epochs"},
    {"window", "W", "64", "deliver in completion order within W positions; 1 = strict order"},
    {"ranks", "W", "none", "W data-parallel ranks: rank R reads next.R (equal counts per epoch)"},
    {"drop_last", "0|1", "0", "pad every rank to ceil(S/W) samples (0) or drop to floor(S/W) (1)"},
    {"format", "plain | tfrecord", "plain",
     "JSF1 records, or TFRecords of tf.train.Example (raw pixels) that tf.data reads "
     "without joaderfs"},
};

}  // namespace joaderfs

#endif  // JOADERFS_SPEC_SPEC_KEYS_H_
