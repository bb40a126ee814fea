#include "tierflow/calibrate/fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace tierflow::calibrate {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Singular values below this fraction of the largest count as zero: the direction is not
// constrained by the data. The linear design is exact to rounding; the LM Jacobian comes from
// central differences (error ~1e-10 relative), hence the looser cut there.
constexpr double kLinearRankCut = 1e-12;
constexpr double kJacobianRankCut = 1e-8;
// Central-difference step in log(parameter), i.e. a relative step of 1e-6.
constexpr double kLogStep = 1e-6;

struct Spread {
  Eigen::MatrixXd covariance;  // of the scaled parameters
  double condition = 0;        // s_max / s_min of the matrix given
};

// Covariance sigma2 (A^T A)^-1 from the SVD of A, with infinite variance for every parameter
// that has weight in a direction whose singular value is (numerically) zero.
Spread SpreadFromSvd(const Eigen::JacobiSVD<Eigen::MatrixXd>& svd, double sigma2, double rank_cut) {
  const Eigen::VectorXd& s = svd.singularValues();
  const Eigen::MatrixXd& v = svd.matrixV();
  const auto p = v.rows();
  Spread out;
  out.covariance = Eigen::MatrixXd::Zero(p, p);
  const double smax = s.size() > 0 ? s(0) : 0.0;
  std::vector<bool> lost(static_cast<size_t>(p), false);
  for (Eigen::Index i = 0; i < s.size(); ++i) {
    if (smax <= 0 || s(i) <= rank_cut * smax) {
      for (Eigen::Index j = 0; j < p; ++j) {
        if (std::fabs(v(j, i)) > 1e-6) lost[static_cast<size_t>(j)] = true;
      }
      continue;
    }
    out.covariance += sigma2 * v.col(i) * v.col(i).transpose() / (s(i) * s(i));
  }
  for (Eigen::Index j = 0; j < p; ++j) {
    if (!lost[static_cast<size_t>(j)]) continue;
    out.covariance.row(j).setConstant(kInf);
    out.covariance.col(j).setConstant(kInf);
  }
  const double smin = s.size() > 0 ? s(s.size() - 1) : 0.0;
  out.condition = (smax > 0 && smin > rank_cut * smax) ? smax / smin : kInf;
  return out;
}

void FillResiduals(const Eigen::VectorXd& predicted, const Eigen::VectorXd& observed, FitResult* r) {
  r->rel_residuals = (predicted - observed).cwiseQuotient(observed);
  const auto n = static_cast<double>(observed.size());
  r->rms_rel_residual = std::sqrt(r->rel_residuals.squaredNorm() / n);
  r->max_rel_residual = r->rel_residuals.cwiseAbs().maxCoeff();
}

Status CheckObserved(const Eigen::VectorXd& observed, Eigen::Index params, const char* who) {
  if (params < 1) return InvalidArgument(std::string(who) + ": no parameters");
  if (observed.size() <= params) {
    return InvalidArgument(std::string(who) + ": " + std::to_string(observed.size()) + " samples for " +
                           std::to_string(params) + " parameters (needs more samples than parameters)");
  }
  for (Eigen::Index i = 0; i < observed.size(); ++i) {
    if (!(observed(i) > 0) || !std::isfinite(observed(i))) {
      return InvalidArgument(std::string(who) + ": sample " + std::to_string(i) + " is " + std::to_string(observed(i)) +
                             " (relative residuals need positive observations)");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<FitResult> FitLinear(const Eigen::MatrixXd& design, const Eigen::VectorXd& observed,
                              const Eigen::VectorXd& weights, const FitOptions& options) {
  TF_RETURN_IF_ERROR(CheckObserved(observed, design.cols(), "linear fit"));
  if (design.rows() != observed.size() || weights.size() != observed.size()) {
    return InvalidArgument("linear fit: design, observations and weights differ in length");
  }
  if ((weights.array() <= 0).any() || !design.allFinite()) {
    return InvalidArgument("linear fit: weights must be positive and the design finite");
  }
  const Eigen::Index n = design.rows();
  const Eigen::Index p = design.cols();
  const Eigen::VectorXd sw = weights.cwiseSqrt();
  const Eigen::MatrixXd a = sw.asDiagonal() * design;
  const Eigen::VectorXd b = sw.cwiseProduct(observed);
  // Unit-norm columns, so that the condition number measures collinearity, not units.
  Eigen::VectorXd scale(p);
  for (Eigen::Index j = 0; j < p; ++j) {
    const double norm = a.col(j).norm();
    scale(j) = norm > 0 ? norm : 1.0;
  }
  const Eigen::MatrixXd scaled = a * scale.cwiseInverse().asDiagonal();
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(scaled, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::VectorXd& s = svd.singularValues();
  Eigen::VectorXd gamma = Eigen::VectorXd::Zero(p);
  for (Eigen::Index i = 0; i < s.size(); ++i) {
    if (s(0) > 0 && s(i) > kLinearRankCut * s(0)) {
      gamma += svd.matrixV().col(i) * (svd.matrixU().col(i).dot(b) / s(i));
    }
  }
  FitResult r;
  r.params = gamma.cwiseQuotient(scale);
  const Eigen::VectorXd predicted = design * r.params;
  FillResiduals(predicted, observed, &r);
  const double weighted_ss = (sw.cwiseProduct(predicted - observed)).squaredNorm();
  const double sigma2 =
      std::max(weighted_ss / static_cast<double>(n - p), options.min_residual_sd * options.min_residual_sd);
  Spread spread = SpreadFromSvd(svd, sigma2, kLinearRankCut);
  r.covariance = scale.cwiseInverse().asDiagonal() * spread.covariance * scale.cwiseInverse().asDiagonal();
  r.condition_number = spread.condition;
  r.std_errors = r.covariance.diagonal().cwiseSqrt();
  r.rel_std_errors.resize(p);
  for (Eigen::Index j = 0; j < p; ++j) {
    r.rel_std_errors(j) = r.params(j) != 0 ? r.std_errors(j) / std::fabs(r.params(j)) : kInf;
  }
  return r;
}

StatusOr<FitResult> FitLinearRelative(const Eigen::MatrixXd& design, const Eigen::VectorXd& observed,
                                      const FitOptions& options) {
  TF_RETURN_IF_ERROR(CheckObserved(observed, design.cols(), "linear fit"));
  return FitLinear(design, observed, observed.cwiseProduct(observed).cwiseInverse(), options);
}

StatusOr<FitResult> FitPositiveLM(const ModelFunction& model, const Eigen::VectorXd& observed,
                                  const Eigen::VectorXd& initial, const FitOptions& options) {
  TF_RETURN_IF_ERROR(CheckObserved(observed, initial.size(), "Levenberg-Marquardt fit"));
  if ((initial.array() <= 0).any() || !initial.allFinite()) {
    return InvalidArgument("Levenberg-Marquardt fit: initial parameters must be positive and finite");
  }
  const Eigen::Index n = observed.size();
  const Eigen::Index p = initial.size();
  // Relative residuals at log-parameters phi; false when the model is not finite and positive.
  auto residuals = [&](const Eigen::VectorXd& phi, Eigen::VectorXd* r) {
    const Eigen::VectorXd theta = phi.array().exp();
    r->resize(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double f = model(theta, static_cast<int>(i));
      if (!std::isfinite(f) || f <= 0) return false;
      (*r)(i) = (f - observed(i)) / observed(i);
    }
    return true;
  };
  auto jacobian = [&](const Eigen::VectorXd& phi, Eigen::MatrixXd* j) {
    j->resize(n, p);
    Eigen::VectorXd up, down;
    for (Eigen::Index k = 0; k < p; ++k) {
      Eigen::VectorXd a = phi, b = phi;
      a(k) += kLogStep;
      b(k) -= kLogStep;
      if (!residuals(a, &up) || !residuals(b, &down)) return false;
      j->col(k) = (up - down) / (2 * kLogStep);
    }
    return true;
  };

  Eigen::VectorXd phi = initial.array().log();
  Eigen::VectorXd r;
  if (!residuals(phi, &r)) {
    return InvalidArgument("Levenberg-Marquardt fit: the model is not finite and positive at the initial parameters");
  }
  double cost = r.squaredNorm();
  double lambda = 1e-3;
  FitResult out;
  out.converged = false;
  Eigen::MatrixXd j;
  for (int iter = 0; iter < options.max_iterations; ++iter) {
    out.iterations = iter + 1;
    if (cost < 1e-30) {  // exact fit
      out.converged = true;
      break;
    }
    if (!jacobian(phi, &j))
      return InvalidArgument("Levenberg-Marquardt fit: the model is not finite near the current parameters");
    const Eigen::MatrixXd jtj = j.transpose() * j;
    const Eigen::VectorXd g = j.transpose() * r;
    const double diag_floor = std::max(jtj.diagonal().maxCoeff(), 1e-300) * 1e-12;
    bool accepted = false;
    bool stuck = false;
    Eigen::VectorXd delta;
    double new_cost = cost;
    Eigen::VectorXd new_r;
    while (true) {
      Eigen::MatrixXd m = jtj;
      for (Eigen::Index k = 0; k < p; ++k) m(k, k) += lambda * std::max(jtj(k, k), diag_floor);
      delta = m.ldlt().solve(-g);
      const Eigen::VectorXd trial = phi + delta;
      if (delta.allFinite() && residuals(trial, &new_r) && (new_cost = new_r.squaredNorm()) < cost) {
        accepted = true;
        phi = trial;
        break;
      }
      lambda *= 10;
      if (lambda > 1e16) {
        stuck = true;  // no step lowers the cost: a (local) minimum
        break;
      }
    }
    if (stuck) {
      out.converged = true;
      break;
    }
    if (accepted) {
      const double decrease = cost - new_cost;
      r = new_r;
      cost = new_cost;
      lambda = std::max(lambda / 10, 1e-12);
      if (decrease <= options.tolerance * cost || delta.norm() < 1e-12) {
        out.converged = true;
        break;
      }
    }
  }
  out.params = phi.array().exp();
  Eigen::VectorXd predicted(n);
  for (Eigen::Index i = 0; i < n; ++i) predicted(i) = model(out.params, static_cast<int>(i));
  FillResiduals(predicted, observed, &out);
  if (!jacobian(phi, &j)) return InvalidArgument("Levenberg-Marquardt fit: the model is not finite at the solution");
  const double sigma2 = std::max(cost / static_cast<double>(n - p), options.min_residual_sd * options.min_residual_sd);
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(j, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Spread spread = SpreadFromSvd(svd, sigma2, kJacobianRankCut);
  out.covariance = spread.covariance;
  out.condition_number = spread.condition * spread.condition;
  // The standard error of log(theta) is, to first order, the relative standard error of theta.
  out.rel_std_errors = out.covariance.diagonal().cwiseSqrt();
  out.std_errors = out.rel_std_errors.cwiseProduct(out.params);
  return out;
}

}  // namespace tierflow::calibrate
