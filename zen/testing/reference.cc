#include "zen/testing/reference.h"

#include <algorithm>
#include <cmath>

#include "zen/core/checked.h"
#include "zen/core/error.h"

namespace zen {
namespace {

// The ranks' inputs of one call must have one shape.
void CheckSameShape(const SparseTensor& first, const SparseTensor& t) {
  if (t.rows() != first.rows() || t.width() != first.width()) {
    throw MismatchError(Where{-1, t.name()}, "shape [", t.rows(), ", ", t.width(),
                        "] differs from [", first.rows(), ", ", first.width(), "]");
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

// The reference keeps only the union of the inputs' rows (sorted ids and
// their double sums), so its memory is proportional to the non-zeros, not
// to rows x width: rows 2^62 with a handful of ids are checked exactly. It
// shares no code with MergeSum / SumAll.
DenseReference::DenseReference(std::span<const SparseTensor> inputs) {
  if (inputs.empty()) throw InvalidArgument("DenseReference needs at least one tensor");
  rows_ = inputs[0].rows();
  width_ = inputs[0].width();
  const size_t w = static_cast<size_t>(width_);
  size_t total = 0;
  for (const auto& t : inputs) {
    CheckSameShape(inputs[0], t);
    total = CheckedAdd(total, t.nnz(), Where{-1, t.name()}, "DenseReference non-zeros");
  }
  ids_.reserve(total);
  for (const auto& t : inputs) ids_.insert(ids_.end(), t.ids().begin(), t.ids().end());
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
  sum_.assign(CheckedMul(ids_.size(), w, Where{-1, inputs[0].name()}, "DenseReference values"),
              0.0);
  for (const auto& t : inputs) {
    auto ids = t.ids();
    WithValueType(t.dtype(), [&]<typename T>() {
      auto vals = t.values<T>();
      for (size_t i = 0; i < ids.size(); ++i) {
        const size_t r = Slot(ids[i]);
        for (size_t j = 0; j < w; ++j) sum_[r * w + j] += static_cast<double>(Widen(vals[i * w + j]));
      }
    });
  }
  present_count_ = static_cast<int64_t>(ids_.size());
  for (double v : sum_) {
    if (std::isfinite(v)) max_abs_ = std::max(max_abs_, std::fabs(v));
  }
}

size_t DenseReference::Slot(int64_t id) const {
  const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
  return it != ids_.end() && *it == id ? static_cast<size_t>(it - ids_.begin()) : ids_.size();
}

Agreement DenseReference::Compare(const SparseTensor& got) const {
  Agreement out;
  if (got.rows() != rows_ || got.width() != width_) {
    out.max_rel_error = INFINITY;
    out.rows_mismatch = present_count_ + static_cast<int64_t>(got.nnz());
    return out;
  }
  const size_t w = static_cast<size_t>(width_);
  std::vector<uint8_t> seen(ids_.size(), 0);
  double max_err = 0;
  auto ids = got.ids();
  // Every value as double (float32 and 16-bit values widen exactly).
  std::vector<double> vals;
  vals.reserve(got.ids().size() * w);
  WithValueType(got.dtype(), [&]<typename T>() {
    for (T v : got.values<T>()) vals.push_back(static_cast<double>(Widen(v)));
  });
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t r = Slot(ids[i]);
    if (r == ids_.size()) {  // a row no input has: its reference sum is zero
      ++out.rows_mismatch;
      for (size_t j = 0; j < w; ++j) max_err = std::max(max_err, ElementError(vals[i * w + j], 0));
      continue;
    }
    seen[r] = 1;
    for (size_t j = 0; j < w; ++j) {
      max_err = std::max(max_err, ElementError(vals[i * w + j], sum_[r * w + j]));
    }
  }
  for (size_t r = 0; r < ids_.size(); ++r) {
    if (!seen[r]) {
      ++out.rows_mismatch;
      for (size_t j = 0; j < w; ++j) max_err = std::max(max_err, ElementError(0, sum_[r * w + j]));
    }
  }
  out.max_rel_error = max_abs_ > 0 ? max_err / max_abs_ : max_err;
  if (std::isnan(max_err)) out.max_rel_error = NAN;
  return out;
}

#define ZEN_COMPARE_DENSE(T, ...)                                               \
  Agreement DenseReference::CompareDense(std::span<const T> got) const {        \
    return CompareDenseValues(got);                                             \
  }
ZEN_FOR_EACH_VALUE_TYPE(ZEN_COMPARE_DENSE)
#undef ZEN_COMPARE_DENSE

template <typename T>
Agreement DenseReference::CompareDenseValues(std::span<const T> got) const {
  Agreement out;
  const size_t w = static_cast<size_t>(width_);
  size_t elements = 0;
  if (!TryMul(static_cast<size_t>(rows_), w, elements) || got.size() != elements) {
    out.max_rel_error = INFINITY;
    out.rows_mismatch = present_count_;
    return out;
  }
  double max_err = 0;
  size_t next = 0;  // index into ids_ of the first present row >= r
  for (size_t r = 0; r < static_cast<size_t>(rows_); ++r) {
    const bool present = next < ids_.size() && static_cast<size_t>(ids_[next]) == r;
    bool nonzero = false;
    for (size_t j = 0; j < w; ++j) {
      const double g = static_cast<double>(Widen(got[r * w + j]));
      nonzero |= g != 0.0;
      max_err = std::max(max_err, ElementError(g, present ? sum_[next * w + j] : 0.0));
    }
    if (nonzero && !present) ++out.rows_mismatch;
    if (present) ++next;
  }
  out.max_rel_error = max_abs_ > 0 ? max_err / max_abs_ : max_err;
  return out;
}

}  // namespace zen
