// Fitting utilities for calibration: weighted linear least squares and a small
// Levenberg-Marquardt for models with positive parameters, both reporting the diagnostics that
// calibration's refusal rules need (standard errors, condition number, relative residuals).
//
// Residuals are RELATIVE, (model - observed) / observed, so that samples spanning decades (a
// 4 KiB read and a 1 GiB read) weigh alike; every observation must therefore be positive.
//
// Standard errors come from the residual variance s^2 = sum(weighted residual^2) / (n - p) and
// the inverse normal matrix. s is floored at FitOptions::min_residual_sd: no measurement is
// more precise than that, and an exact (synthetic, noise-free) fit would otherwise report every
// parameter as determined whatever the design. A direction of parameter space that the data do
// not constrain at all (a zero singular value) gives an infinite standard error.
//
// Thread safety: pure functions.
#pragma once

#include <Eigen/Dense>
#include <functional>

#include "tierflow/core/status.h"

namespace tierflow::calibrate {

struct FitOptions {
  // Floor of the residual standard deviation, in the units of the weighted residual (with
  // relative weights: a fraction, 1e-3 = 0.1 %).
  double min_residual_sd = 1e-3;
  int max_iterations = 200;  // Levenberg-Marquardt only
  double tolerance = 1e-12;  // LM: stop when the relative cost decrease is below this
};

struct FitResult {
  Eigen::VectorXd params;
  Eigen::VectorXd std_errors;      // absolute; +inf where the data do not determine the parameter
  Eigen::VectorXd rel_std_errors;  // std_error / |param| (LM: the standard error of log(param))
  Eigen::MatrixXd covariance;      // of params (LM: of log(params)); inf entries where undetermined
  // Linear: of the design sqrt(W) X with unit-norm columns. LM: of J^T J, J the Jacobian of the
  // relative residuals with respect to log(params) (so cond(J^T J) = cond(J)^2).
  double condition_number = 0;
  Eigen::VectorXd rel_residuals;  // (model - observed) / observed, per sample
  double rms_rel_residual = 0;
  double max_rel_residual = 0;  // largest |relative residual|
  int iterations = 0;           // LM only
  bool converged = true;        // LM: false when max_iterations ran out
};

// Minimises sum_i w_i ((X beta)_i - y_i)^2 (SVD of the column-scaled sqrt(W) X; rank-deficient
// designs get the minimum-norm solution and infinite standard errors in the lost directions).
// Requires rows(X) == size(y) == size(w) > cols(X) >= 1, y > 0, w > 0; errors otherwise.
StatusOr<FitResult> FitLinear(const Eigen::MatrixXd& design, const Eigen::VectorXd& observed,
                              const Eigen::VectorXd& weights, const FitOptions& options = {});
// FitLinear with w_i = 1 / y_i^2: least squares of the relative residuals.
StatusOr<FitResult> FitLinearRelative(const Eigen::MatrixXd& design, const Eigen::VectorXd& observed,
                                      const FitOptions& options = {});

// model(params, i) predicts sample i (> 0) for positive params.
using ModelFunction = std::function<double(const Eigen::VectorXd& params, int sample)>;

// Levenberg-Marquardt on the relative residuals over log(params) (so every parameter stays
// positive and the step is scale-free), with a central-difference Jacobian. Requires
// size(y) > size(initial) >= 1, y > 0, initial > 0, and a model that is finite and positive
// near the solution; errors otherwise.
StatusOr<FitResult> FitPositiveLM(const ModelFunction& model, const Eigen::VectorXd& observed,
                                  const Eigen::VectorXd& initial, const FitOptions& options = {});

}  // namespace tierflow::calibrate
