#include "sampling/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace joaderfs {
namespace {

// For even df = 2k: Q(k, x/2) = e^(-x/2) Σ_{i<k} (x/2)^i / i!.
double EvenDfSurvival(double x, int df) {
  long double term = std::exp(-static_cast<long double>(x) / 2);
  long double sum = 0;
  for (int i = 0; i < df / 2; ++i) {
    sum += term;
    term *= static_cast<long double>(x) / 2 / (i + 1);
  }
  return static_cast<double>(sum);
}

TEST(Statistics, ChiSquareSurvivalKnownQuantiles) {
  EXPECT_NEAR(ChiSquareSurvival(3.841458820694124, 1), 0.05, 1e-9);
  EXPECT_NEAR(ChiSquareSurvival(18.307038053275146, 10), 0.05, 1e-9);
  EXPECT_NEAR(ChiSquareSurvival(6.634896601021214, 1), 0.01, 1e-9);
  EXPECT_DOUBLE_EQ(ChiSquareSurvival(0, 5), 1.0);
}

TEST(Statistics, ChiSquareSurvivalMatchesClosedFormForEvenDf) {
  for (int df : {2, 4, 30, 1000}) {
    for (double ratio : {0.5, 0.9, 1.0, 1.1, 1.3, 2.0}) {
      const double x = ratio * df;
      SCOPED_TRACE(testing::Message() << "df " << df << " x " << x);
      const double expected = EvenDfSurvival(x, df);
      EXPECT_NEAR(ChiSquareSurvival(x, df), expected, 1e-10 + 1e-9 * expected);
    }
  }
}

TEST(Statistics, PearsonUniformStatistic) {
  const std::vector<uint64_t> flat = {5, 5, 5, 5};
  EXPECT_DOUBLE_EQ(PearsonUniformStatistic(flat), 0.0);
  const std::vector<uint64_t> skew = {8, 2, 5, 5};
  EXPECT_DOUBLE_EQ(PearsonUniformStatistic(skew), (9.0 + 9.0) / 5.0);
}

TEST(Statistics, BinomialTwoSided) {
  EXPECT_NEAR(BinomialTwoSidedPValue(0, 10, 0.5), 2.0 / 1024, 1e-12);
  EXPECT_NEAR(BinomialTwoSidedPValue(5, 10, 0.5), 1.0, 1e-12);
  EXPECT_NEAR(BinomialTwoSidedPValue(3, 20, 0.5), 2.0 * 1351 / 1048576, 1e-12);
  EXPECT_NEAR(BinomialTwoSidedPValue(17, 20, 0.5), 2.0 * 1351 / 1048576, 1e-12);
}

TEST(Statistics, BenjaminiHochberg) {
  const std::vector<double> one = {0.01, 0.04, 0.03, 0.5};
  EXPECT_EQ(BenjaminiHochbergRejections(one, 0.05), 1u);
  const std::vector<double> two = {0.001, 0.008, 0.039, 0.041, 0.042,
                                   0.06,  0.074, 0.205, 0.212, 0.216};
  EXPECT_EQ(BenjaminiHochbergRejections(two, 0.05), 2u);
  // A p-value that fails its own rank passes through a later one.
  const std::vector<double> step_up = {0.03, 0.04};
  EXPECT_EQ(BenjaminiHochbergRejections(step_up, 0.05), 2u);
  const std::vector<double> none = {0.3, 0.9};
  EXPECT_EQ(BenjaminiHochbergRejections(none, 0.05), 0u);
}

}  // namespace
}  // namespace joaderfs
