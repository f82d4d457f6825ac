#include "tools/zen/bench_reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <utility>

#include "zen/core/error.h"

namespace zen::cli {
namespace {

// |got - want|, with NaN and infinities compared as DenseReference does.
double ElementError(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0 : INFINITY;
  if (std::isinf(got) || std::isinf(want)) return got == want ? 0 : INFINITY;
  return std::fabs(got - want);
}

}  // namespace

SparseReference::SparseReference(std::span<const SparseTensor> inputs) {
  if (inputs.empty()) throw InvalidArgument("SparseReference needs at least one tensor");
  rows_ = inputs[0].rows();
  width_ = inputs[0].width();
  size_t total = 0;
  for (const SparseTensor& t : inputs) {
    if (t.rows() != rows_ || t.width() != width_) {
      throw MismatchError(Where{-1, t.name()}, "shape [", t.rows(), ", ", t.width(),
                          "] differs from [", rows_, ", ", width_, "]");
    }
    total += t.nnz();
  }
  const size_t w = static_cast<size_t>(width_);
  // k-way merge: (next id, rank) of every rank with rows left.
  using Head = std::pair<int64_t, size_t>;
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
  std::vector<size_t> pos(inputs.size(), 0);
  for (size_t r = 0; r < inputs.size(); ++r) {
    if (inputs[r].nnz() > 0) heads.push({inputs[r].ids()[0], r});
  }
  ids_.reserve(total);
  while (!heads.empty()) {
    const auto [id, r] = heads.top();
    heads.pop();
    if (ids_.empty() || ids_.back() != id) {
      ids_.push_back(id);
      sum_.resize(ids_.size() * w, 0.0);
    }
    const auto vals = inputs[r].values();
    double* dst = sum_.data() + (ids_.size() - 1) * w;
    const size_t i = pos[r]++;
    for (size_t j = 0; j < w; ++j) dst[j] += static_cast<double>(vals[i * w + j]);
    if (pos[r] < inputs[r].nnz()) heads.push({inputs[r].ids()[pos[r]], r});
  }
  ids_.shrink_to_fit();
  for (double v : sum_) {
    if (std::isfinite(v)) max_abs_ = std::max(max_abs_, std::fabs(v));
  }
}

Agreement SparseReference::Compare(const SparseTensor& got) const {
  Agreement out;
  if (got.rows() != rows_ || got.width() != width_) {
    out.max_rel_error = INFINITY;
    out.rows_mismatch = present_rows() + static_cast<int64_t>(got.nnz());
    return out;
  }
  const size_t w = static_cast<size_t>(width_);
  const auto gids = got.ids();
  const auto gvals = got.values();
  double max_err = 0;
  size_t k = 0;  // next reference row
  // A reference row the result lacks: its values are missed entirely.
  const auto missing = [&](size_t ref_row) {
    ++out.rows_mismatch;
    for (size_t j = 0; j < w; ++j) max_err = std::max(max_err, ElementError(0, sum_[ref_row * w + j]));
  };
  for (size_t i = 0; i < gids.size(); ++i) {
    const int64_t id = gids[i];
    while (k < ids_.size() && ids_[k] < id) missing(k++);
    const double* want = nullptr;
    if (k < ids_.size() && ids_[k] == id) {
      want = sum_.data() + k * w;
    } else if (k > 0 && ids_[k - 1] == id) {
      want = sum_.data() + (k - 1) * w;  // a repeated id in the result
    }
    if (!want) ++out.rows_mismatch;  // a row the reference does not have
    for (size_t j = 0; j < w; ++j) {
      max_err = std::max(max_err, ElementError(gvals[i * w + j], want ? want[j] : 0.0));
    }
    if (k < ids_.size() && ids_[k] == id) ++k;
  }
  while (k < ids_.size()) missing(k++);
  out.max_rel_error = max_abs_ > 0 ? max_err / max_abs_ : max_err;
  if (std::isnan(max_err)) out.max_rel_error = NAN;
  return out;
}

Agreement SparseReference::CompareDense(std::span<const float> got) const {
  Agreement out;
  const size_t w = static_cast<size_t>(width_);
  if (got.size() != static_cast<size_t>(rows_) * w) {
    out.max_rel_error = INFINITY;
    out.rows_mismatch = present_rows();
    return out;
  }
  double max_err = 0;
  size_t k = 0;  // next reference row
  for (int64_t row = 0; row < rows_; ++row) {
    const float* g = got.data() + static_cast<size_t>(row) * w;
    if (k < ids_.size() && ids_[k] == row) {
      const double* want = sum_.data() + k * w;
      for (size_t j = 0; j < w; ++j) max_err = std::max(max_err, ElementError(g[j], want[j]));
      ++k;
      continue;
    }
    bool nonzero = false;
    for (size_t j = 0; j < w; ++j) {
      if (g[j] != 0.0f) {
        nonzero = true;
        max_err = std::max(max_err, ElementError(g[j], 0.0));
      }
    }
    if (nonzero) ++out.rows_mismatch;
  }
  out.max_rel_error = max_abs_ > 0 ? max_err / max_abs_ : max_err;
  if (std::isnan(max_err)) out.max_rel_error = NAN;
  return out;
}

}  // namespace zen::cli
