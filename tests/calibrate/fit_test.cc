// The fitting utilities against closed forms: exact lines and Little's law recovered, standard
// errors that cover the truth under noise, infinite ones where the design loses a direction.
#include "tierflow/calibrate/fit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "synthetic_records.h"

namespace tierflow::calibrate {
namespace {

TEST(FitLinearTest, ExactLineIsRecoveredWithFlooredErrors) {
  // t = 5 us + bytes / 10 GB/s over 1 KiB..1 GiB: samples spanning six decades.
  Eigen::MatrixXd x(7, 2);
  Eigen::VectorXd y(7);
  for (int i = 0; i < 7; ++i) {
    const double b = std::pow(10.0, 3 + i);
    x(i, 0) = 1;
    x(i, 1) = b;
    y(i) = 5e-6 + b / 10e9;
  }
  auto fit = FitLinearRelative(x, y);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->params(0), 5e-6, 5e-6 * 1e-9);
  EXPECT_NEAR(fit->params(1), 1e-10, 1e-10 * 1e-9);
  EXPECT_LT(fit->max_rel_residual, 1e-12);
  // Noise-free: the standard errors come from the 0.1 % floor, small but not zero.
  EXPECT_GT(fit->rel_std_errors(0), 0);
  EXPECT_LT(fit->rel_std_errors(0), 0.01);
  EXPECT_LT(fit->rel_std_errors(1), 0.01);
  EXPECT_GT(fit->condition_number, 1);
  EXPECT_LT(fit->condition_number, 1e3);
}

TEST(FitLinearTest, NoisyStandardErrorsCoverTheTruth) {
  testing::Noise noise(0.03);
  const int n = 40;
  Eigen::MatrixXd x(n, 2);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) {
    const double b = 4096.0 * std::pow(2.0, i % 20);
    x(i, 0) = 1;
    x(i, 1) = b;
    y(i) = (20e-6 + b / 12e9) * noise.Factor();
  }
  auto fit = FitLinearRelative(x, y);
  ASSERT_TRUE(fit.ok());
  // Within 4 standard errors (a 3 % uniform noise has sd 1.7 %; the fit must say so).
  EXPECT_NEAR(fit->params(0), 20e-6, 4 * fit->std_errors(0));
  EXPECT_NEAR(fit->params(1), 1 / 12e9, 4 * fit->std_errors(1));
  EXPECT_GT(fit->rms_rel_residual, 0.005);
  EXPECT_LT(fit->rms_rel_residual, 0.03);
  EXPECT_LE(fit->max_rel_residual, 0.035);
}

TEST(FitLinearTest, CollinearDesignHasInfiniteErrors) {
  Eigen::MatrixXd x(5, 2);
  Eigen::VectorXd y(5);
  for (int i = 0; i < 5; ++i) {
    x(i, 0) = i + 1;
    x(i, 1) = 2 * (i + 1);  // the same regressor twice: only their combination is determined
    y(i) = 3.0 * (i + 1);
  }
  auto fit = FitLinearRelative(x, y);
  ASSERT_TRUE(fit.ok());
  EXPECT_TRUE(std::isinf(fit->condition_number));
  EXPECT_TRUE(std::isinf(fit->std_errors(0)));
  EXPECT_TRUE(std::isinf(fit->std_errors(1)));
  EXPECT_LT(fit->max_rel_residual, 1e-12);  // the minimum-norm solution still fits
}

TEST(FitLinearTest, RejectsTooFewSamplesAndNonPositiveObservations) {
  Eigen::MatrixXd x = Eigen::MatrixXd::Ones(2, 2);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(2);
  EXPECT_FALSE(FitLinearRelative(x, y).ok());
  Eigen::MatrixXd x3 = Eigen::MatrixXd::Ones(3, 1);
  Eigen::VectorXd y3(3);
  y3 << 1, 0, 2;
  auto bad = FitLinearRelative(x3, y3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("positive observations"), std::string::npos) << bad.status().message();
}

double Littles(double peak, double latency, double block, double qd) {
  return std::min(peak, qd * block / (latency + block / peak));
}

TEST(FitPositiveLMTest, RecoversLittlesLawFromAFarStart) {
  std::vector<std::pair<double, double>> grid;
  for (double b : {4096.0, 65536.0, 1048576.0, 16777216.0}) {
    for (double qd : {1.0, 4.0, 32.0}) grid.emplace_back(b, qd);
  }
  Eigen::VectorXd y(static_cast<Eigen::Index>(grid.size()));
  for (size_t i = 0; i < grid.size(); ++i)
    y(static_cast<Eigen::Index>(i)) = Littles(7e9, 80e-6, grid[i].first, grid[i].second);
  Eigen::VectorXd init(2);
  init << 1e9, 1e-3;  // 7x and 12x off
  auto fit = FitPositiveLM(
      [&](const Eigen::VectorXd& p, int i) {
        return Littles(p(0), p(1), grid[static_cast<size_t>(i)].first, grid[static_cast<size_t>(i)].second);
      },
      y, init);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_TRUE(fit->converged);
  EXPECT_NEAR(fit->params(0), 7e9, 7e9 * 1e-6);
  EXPECT_NEAR(fit->params(1), 80e-6, 80e-6 * 1e-6);
  EXPECT_LT(fit->max_rel_residual, 1e-8);
  EXPECT_LT(fit->condition_number, 1e6);
}

TEST(FitPositiveLMTest, ParameterWithoutInfluenceIsUndetermined) {
  // Every sample saturated: the latency never shows, its standard error is unbounded.
  Eigen::VectorXd y(4);
  y << 7e9, 7e9, 7e9, 7e9;
  Eigen::VectorXd init(2);
  init << 6e9, 50e-6;
  auto fit = FitPositiveLM([&](const Eigen::VectorXd& p, int) { return Littles(p(0), p(1), 16 << 20, 64); }, y, init);
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->params(0), 7e9, 7e9 * 1e-6);
  EXPECT_LT(fit->rel_std_errors(0), 0.01);
  EXPECT_TRUE(std::isinf(fit->rel_std_errors(1)));
  EXPECT_TRUE(std::isinf(fit->condition_number));
}

TEST(FitPositiveLMTest, RejectsNonPositiveStart) {
  Eigen::VectorXd y = Eigen::VectorXd::Ones(3);
  Eigen::VectorXd init(1);
  init << -1;
  EXPECT_FALSE(FitPositiveLM([](const Eigen::VectorXd& p, int) { return p(0); }, y, init).ok());
}

}  // namespace
}  // namespace tierflow::calibrate
