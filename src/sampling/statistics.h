// Small statistics toolkit for the planner's randomness tests: chi-square and
// binomial p-values and the Benjamini-Hochberg procedure. Test support only;
// not part of the daemon.
//
// Thread-safety: pure functions.

#ifndef JOADERFS_SAMPLING_STATISTICS_H_
#define JOADERFS_SAMPLING_STATISTICS_H_

#include <cstdint>
#include <span>

namespace joaderfs {

// Q(a, x) = Γ(a, x) / Γ(a), the regularized upper incomplete gamma function,
// to about 1e-12 relative accuracy. REQUIRES: a > 0, x >= 0.
double UpperIncompleteGammaQ(double a, double x);

// P(X >= statistic) for X ~ chi-square with `df` degrees of freedom (exact,
// through UpperIncompleteGammaQ; no normal approximation).
double ChiSquareSurvival(double statistic, double df);

// Pearson's statistic of `counts` against equal expected counts.
double PearsonUniformStatistic(std::span<const uint64_t> counts);

// Two-sided exact binomial test of `successes` out of `trials` against
// probability `p`: the total probability of outcomes no more likely than the
// one observed.
double BinomialTwoSidedPValue(uint64_t successes, uint64_t trials, double p);

// Number of hypotheses the Benjamini-Hochberg procedure rejects at false
// discovery rate `alpha`.
size_t BenjaminiHochbergRejections(std::span<const double> p_values, double alpha);

}  // namespace joaderfs

#endif  // JOADERFS_SAMPLING_STATISTICS_H_
