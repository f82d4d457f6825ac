#include "zen/testing/reference.h"

#include <algorithm>
#include <cmath>

#include "zen/core/error.h"

namespace zen {
namespace {

void CheckSameShape(const SparseTensor& a, const SparseTensor& b) {
  if (a.rows() != b.rows() || a.width() != b.width()) {
    throw InvalidArgument(Where{-1, a.name()}, "shape [", a.rows(), ", ", a.width(),
                          "] does not match [", b.rows(), ", ", b.width(), "]");
  }
}

// |got - want|, where NaN matches only NaN and an infinity only the same
// infinity (a plain fabs would yield NaN, which std::max ignores).
double ElementError(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) {
    return std::isnan(got) && std::isnan(want) ? 0 : INFINITY;
  }
  if (std::isinf(got) || std::isinf(want)) return got == want ? 0 : INFINITY;
  return std::fabs(got - want);
}

}  // namespace

DenseReference::DenseReference(std::span<const SparseTensor> inputs) {
  if (inputs.empty()) throw InvalidArgument("DenseReference needs at least one tensor");
  rows_ = inputs[0].rows();
  width_ = inputs[0].width();
  const size_t w = static_cast<size_t>(width_);
  sum_.assign(static_cast<size_t>(rows_) * w, 0.0);
  present_.assign(static_cast<size_t>(rows_), 0);
  for (const auto& t : inputs) {
    CheckSameShape(inputs[0], t);
    auto ids = t.ids();
    auto vals = t.values();
    for (size_t i = 0; i < ids.size(); ++i) {
      const size_t r = static_cast<size_t>(ids[i]);
      present_[r] = 1;
      for (size_t j = 0; j < w; ++j) sum_[r * w + j] += vals[i * w + j];
    }
  }
  for (uint8_t p : present_) present_count_ += p;
  for (double v : sum_) {
    if (std::isfinite(v)) max_abs_ = std::max(max_abs_, std::fabs(v));
  }
}

Agreement DenseReference::Compare(const SparseTensor& got) const {
  Agreement out;
  if (got.rows() != rows_ || got.width() != width_) {
    out.max_rel_error = INFINITY;
    out.rows_mismatch = present_count_ + static_cast<int64_t>(got.nnz());
    return out;
  }
  const size_t w = static_cast<size_t>(width_);
  std::vector<uint8_t> seen(present_.size(), 0);
  double max_err = 0;
  auto ids = got.ids();
  auto vals = got.values();
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t r = static_cast<size_t>(ids[i]);
    seen[r] = 1;
    if (!present_[r]) ++out.rows_mismatch;
    for (size_t j = 0; j < w; ++j) {
      max_err = std::max(max_err, ElementError(vals[i * w + j], sum_[r * w + j]));
    }
  }
  for (size_t r = 0; r < present_.size(); ++r) {
    if (present_[r] && !seen[r]) {
      ++out.rows_mismatch;
      for (size_t j = 0; j < w; ++j) max_err = std::max(max_err, ElementError(0, sum_[r * w + j]));
    }
  }
  out.max_rel_error = max_abs_ > 0 ? max_err / max_abs_ : max_err;
  if (std::isnan(max_err)) out.max_rel_error = NAN;
  return out;
}

Agreement DenseReference::CompareDense(std::span<const float> got) const {
  Agreement out;
  const size_t w = static_cast<size_t>(width_);
  if (got.size() != sum_.size()) {
    out.max_rel_error = INFINITY;
    out.rows_mismatch = present_count_;
    return out;
  }
  double max_err = 0;
  for (size_t r = 0; r < present_.size(); ++r) {
    bool nonzero = false;
    for (size_t j = 0; j < w; ++j) {
      const float g = got[r * w + j];
      nonzero |= g != 0.0f;
      max_err = std::max(max_err, ElementError(g, sum_[r * w + j]));
    }
    if (nonzero && !present_[r]) ++out.rows_mismatch;
  }
  out.max_rel_error = max_abs_ > 0 ? max_err / max_abs_ : max_err;
  return out;
}

}  // namespace zen
