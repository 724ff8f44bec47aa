#include "sampling/statistics.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

namespace joaderfs {

double UpperIncompleteGammaQ(double a, double x) {
  assert(a > 0 && x >= 0);
  if (x == 0) return 1.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  constexpr double kEpsilon = 1e-15;
  constexpr int kMaxTerms = 100000;
  if (x < a + 1) {
    // P(a, x) = x^a e^-x / Γ(a) * Σ_n x^n / (a (a+1) ... (a+n)).
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < kMaxTerms && term > sum * kEpsilon; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefix));
  }
  // Γ(a, x) = x^a e^-x / (x+1-a - 1(1-a)/(x+3-a - 2(2-a)/(x+5-a - ...))),
  // evaluated with the modified Lentz method.
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < kMaxTerms; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < kEpsilon) break;
  }
  return std::exp(log_prefix) * h;
}

double ChiSquareSurvival(double statistic, double df) {
  return UpperIncompleteGammaQ(df / 2, std::max(0.0, statistic) / 2);
}

double PearsonUniformStatistic(std::span<const uint64_t> counts) {
  double total = 0;
  for (uint64_t c : counts) total += static_cast<double>(c);
  const double expected = total / static_cast<double>(counts.size());
  double statistic = 0;
  for (uint64_t c : counts) {
    const double diff = static_cast<double>(c) - expected;
    statistic += diff * diff / expected;
  }
  return statistic;
}

double BinomialTwoSidedPValue(uint64_t successes, uint64_t trials, double p) {
  assert(successes <= trials && p > 0 && p < 1);
  const double n = static_cast<double>(trials);
  auto log_pmf = [&](uint64_t k) {
    const double kd = static_cast<double>(k);
    return std::lgamma(n + 1) - std::lgamma(kd + 1) - std::lgamma(n - kd + 1) + kd * std::log(p) +
           (n - kd) * std::log1p(-p);
  };
  // Outcomes as likely as the observed one count in (relative slack for
  // rounding, as R's binom.test does).
  const double threshold = log_pmf(successes) + 1e-7;
  double total = 0;
  for (uint64_t k = 0; k <= trials; ++k) {
    const double lp = log_pmf(k);
    if (lp <= threshold) total += std::exp(lp);
  }
  return std::min(1.0, total);
}

size_t BenjaminiHochbergRejections(std::span<const double> p_values, double alpha) {
  std::vector<double> sorted(p_values.begin(), p_values.end());
  std::sort(sorted.begin(), sorted.end());
  const double m = static_cast<double>(sorted.size());
  size_t rejected = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] <= static_cast<double>(i + 1) * alpha / m) rejected = i + 1;
  }
  return rejected;
}

}  // namespace joaderfs
