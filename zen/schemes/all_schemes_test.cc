// Every registered scheme, over every backend, world size, width, density and
// skew of the foundation grid, and every dtype (float32, float64, bfloat16,
// float16), against the independent dense reference (summed in double). New
// schemes join this grid by being registered; a scheme that does not declare
// a dtype (SyncCapabilities::dtypes) refuses it with InvalidArgument on
// every rank.
//
// bfloat16 and float16 inputs are multiples of 2^-4 with 8 significant bits,
// so every float32 sum of them is exact and the only roundings are a
// scheme's own: a scheme that rounds once per value (RoundsOnce) must give
// the reference's double sum rounded once to 16 bits, bit for bit; one that
// rounds at each hop (the ring, sparcml) must stay within n x u x sum|x_i|
// of it (u = 2^-8 for bfloat16, 2^-11 for float16: each of at most n
// roundings is off by at most u of a partial sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "zen/testing/ranks.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/registry.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

// density < 0 encodes "one rank empty, the others at 1e-3".
constexpr double kOneRankEmpty = -1;

struct Case {
  std::string scheme;
  Backend backend;
  int world;
  int64_t width;
  double density;
  double skew;
  DType dtype = DType::kFloat32;
};

// The error allowed against the double reference: float32 sums round each
// addition to 24 bits; float64 ones to 53 (a float32 sum of the float64
// inputs below is off by about 1e-8). The 16-bit dtypes are checked per
// element (Half16Check, exact or against each element's own bound); the
// relative bound here only catches gross errors.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 1e-12;
    case DType::kBfloat16:
    case DType::kFloat16: return 0.5;
    default: return 1e-5;
  }
}

bool Is16Bit(DType d) { return d == DType::kBfloat16 || d == DType::kFloat16; }

// The schemes whose 16-bit sums meet in one place and are rounded once per
// value (their SyncCapabilities comments say so); the others round at each
// hop.
bool RoundsOnce(const std::string& scheme) {
  return scheme == "agsparse" || scheme == "sparse_ps" || scheme == "omnireduce" ||
         scheme == "zen";
}

// The per-element check of a 16-bit result against the inputs, computed
// here in double without the library's kernels: the exact sum and the sum
// of magnitudes of every present element.
class Half16Check {
 public:
  Half16Check(const std::vector<SparseTensor>& inputs, const std::string& scheme, DType dtype)
      : width_(static_cast<size_t>(inputs[0].width())), world_(static_cast<int>(inputs.size())),
        once_(RoundsOnce(scheme)), u_(dtype == DType::kBfloat16 ? 0x1p-8 : 0x1p-11) {
    for (const SparseTensor& t : inputs) {
      WithValueType(t.dtype(), [&]<typename T>() {
        const auto v = t.values<T>();
        for (size_t i = 0; i < t.nnz(); ++i) {
          auto& row = rows_[t.ids()[i]];
          row.resize(2 * width_, 0.0);
          for (size_t j = 0; j < width_; ++j) {
            const double x = static_cast<double>(Widen(v[i * width_ + j]));
            row[j] += x;
            row[width_ + j] += std::fabs(x);
          }
        }
      });
    }
  }
  // Elements of `got` (the value of row `id`, column j) that break the bound.
  template <typename T>
  size_t Bad(int64_t id, size_t j, T got) const {
    const auto it = rows_.find(id);
    const double sum = it == rows_.end() ? 0.0 : it->second[j];
    const double mag = it == rows_.end() ? 0.0 : it->second[width_ + j];
    const double g = static_cast<double>(Widen(got));
    if (once_) {
      // The double sum is exact in float (see above): one rounding.
      return Narrow<T>(static_cast<float>(sum)) == got ? 0 : 1;
    }
    return std::fabs(g - sum) <= world_ * u_ * mag ? 0 : 1;
  }
  template <typename T>
  size_t BadSparse(const SparseTensor& got) const {
    size_t bad = 0;
    const auto v = got.values<T>();
    for (size_t i = 0; i < got.nnz(); ++i) {
      for (size_t j = 0; j < width_; ++j) bad += Bad(got.ids()[i], j, v[i * width_ + j]);
    }
    return bad;
  }
  template <typename T>
  size_t BadDense(std::span<const T> got) const {
    size_t bad = 0;
    for (size_t e = 0; e < got.size(); ++e) {
      bad += Bad(static_cast<int64_t>(e / width_), e % width_, got[e]);
    }
    return bad;
  }

 private:
  size_t width_;
  int world_;
  bool once_;
  double u_;
  std::map<int64_t, std::vector<double>> rows_;  // id -> sums, then sums of |x|
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string d = c.density == kOneRankEmpty ? "oneempty"
                  : c.density == 0           ? "empty"
                                             : std::to_string(static_cast<int>(c.density * 1e4)) + "e4";
  std::string name = c.scheme + "_" + testing::BackendName(c.backend) + "_n" +
                     std::to_string(c.world) + "_w" + std::to_string(c.width) + "_d" + d + "_s" +
                     std::to_string(static_cast<int>(c.skew * 10)) +
                     (c.dtype == DType::kFloat32 ? "" : std::string("_") + DTypeName(c.dtype));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

std::vector<SparseTensor> Inputs(const Case& c, int64_t rows) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.width = c.width;
  spec.skew = c.skew;
  spec.seed = 42;
  spec.density = c.density == kOneRankEmpty ? 1e-3 : c.density;
  std::vector<SparseTensor> in = GenerateSynthetic(spec, c.world);
  if (c.density == kOneRankEmpty) in[static_cast<size_t>(c.world) / 2] = SparseTensor::Empty(rows, c.width);
  if (c.dtype == DType::kFloat64) {
    // Values float32 cannot hold: each generated value times (1 + 2^-30 / 3).
    for (SparseTensor& t : in) {
      std::vector<double> values(t.values().begin(), t.values().end());
      for (double& v : values) v += v * (0x1p-30 / 3);
      t = SparseTensor::FromSorted(rows, c.width, {t.ids().begin(), t.ids().end()},
                                   std::move(values), t.name());
    }
  }
  if (Is16Bit(c.dtype)) {
    // k x 2^(e - 4) with k in [-255, 255] \ {0} and e in [0, 3]: exact in
    // both 16-bit formats, and every float sum of up to 8 of them is exact.
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    for (SparseTensor& t : in) {
      WithValueType(c.dtype, [&]<typename T>() {
        std::vector<T> values(t.values().size());
        for (T& v : values) {
          state = state * 6364136223846793005ULL + 1442695040888963407ULL;
          const int k = static_cast<int>((state >> 33) % 255) + 1;
          const int e = static_cast<int>((state >> 20) % 4);
          const float x = std::ldexp(static_cast<float>((state >> 40) & 1 ? k : -k), e - 4);
          v = Narrow<T>(x);
        }
        t = SparseTensor::FromSorted(rows, c.width, {t.ids().begin(), t.ids().end()},
                                     std::move(values), t.name());
      });
    }
  }
  return in;
}

// Whether the scheme sums c's dtype; if not, checks that input of that
// dtype is InvalidArgument on every rank naming the scheme and the dtype
// (for the dense and dense-output entries too), and the test has nothing
// more to do.
bool Sums(const Case& c, int64_t rows) {
  const std::unique_ptr<Scheme> probe = BuiltinSchemes().Create(c.scheme);
  if (probe->capabilities().Sums(c.dtype)) return true;
  std::mutex mu;
  int raised = 0;
  testing::RunRanks(c.backend, c.world, [&](Communicator& comm) {
    auto scheme = BuiltinSchemes().Create(c.scheme);
    const SparseTensor local = SparseTensor::Empty(rows, c.width, "t", c.dtype);
    WithValueType(c.dtype, [&]<typename T>() {
      std::vector<T> dense(static_cast<size_t>(rows * c.width));
      for (int entry = 0; entry < 3; ++entry) {
        try {
          if (entry == 0) scheme->Sync(comm, local);
          if (entry == 1) scheme->SyncDense(comm, std::span<T>(dense), rows, c.width, "t");
          if (entry == 2) scheme->SyncInto(comm, local, std::span<T>(dense));
        } catch (const InvalidArgument& e) {
          std::lock_guard lock(mu);
          ++raised;
          EXPECT_NE(std::string(e.what()).find(DTypeName(c.dtype)), std::string::npos)
              << e.what();
          EXPECT_NE(std::string(e.what()).find(c.scheme), std::string::npos) << e.what();
        }
      }
    });
  });
  EXPECT_EQ(raised, 3 * c.world);
  return false;
}

class AllSchemesTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllSchemesTest, SparseSyncEqualsDenseReference) {
  const Case& c = GetParam();
  const int64_t rows = c.width == 1 ? 20000 : 1500;
  if (!Sums(c, rows)) return;
  const std::vector<SparseTensor> inputs = Inputs(c, rows);
  const DenseReference reference(inputs);
  const Half16Check half(inputs, c.scheme, c.dtype);
  const SchemeRegistry registry = BuiltinSchemes();
  std::mutex mu;
  testing::RunRanks(c.backend, c.world, [&](Communicator& comm) {
    auto scheme = registry.Create(c.scheme);
    // Two calls: the second must work on the same communicator (caches, tags).
    for (int call = 0; call < 2; ++call) {
      const SparseTensor sum = scheme->Sync(comm, inputs[static_cast<size_t>(comm.rank())]);
      const Agreement a = reference.Compare(sum);
      const size_t bad16 = !Is16Bit(c.dtype) ? 0 : WithValueType(c.dtype, [&]<typename T>() {
        return half.BadSparse<T>(sum);
      });
      std::lock_guard lock(mu);
      EXPECT_EQ(bad16, 0u) << "rank " << comm.rank() << " call " << call;
      EXPECT_EQ(sum.dtype(), c.dtype) << "rank " << comm.rank();
      EXPECT_LE(a.max_rel_error, Tolerance(c.dtype)) << "rank " << comm.rank() << " call " << call;
      EXPECT_EQ(a.rows_mismatch, 0) << "rank " << comm.rank() << " call " << call;
    }
  });
}

TEST_P(AllSchemesTest, DenseBufferSyncEqualsDenseReference) {
  const Case& c = GetParam();
  const int64_t rows = c.width == 1 ? 20000 : 1500;
  if (!Sums(c, rows)) return;
  const std::vector<SparseTensor> inputs = Inputs(c, rows);
  const DenseReference reference(inputs);
  const Half16Check half(inputs, c.scheme, c.dtype);
  const SchemeRegistry registry = BuiltinSchemes();
  std::mutex mu;
  testing::RunRanks(c.backend, c.world, [&](Communicator& comm) {
    auto scheme = registry.Create(c.scheme);
    WithValueType(c.dtype, [&]<typename T>() {
      std::vector<T> buffer = inputs[static_cast<size_t>(comm.rank())].ToDense<T>();
      scheme->SyncDense(comm, std::span<T>(buffer), rows, c.width, "bucket");
      const Agreement a = reference.CompareDense(std::span<const T>(buffer));
      const size_t bad16 = Is16Bit(c.dtype) ? half.BadDense<T>(buffer) : 0;
      std::lock_guard lock(mu);
      EXPECT_EQ(bad16, 0u) << "rank " << comm.rank();
      EXPECT_LE(a.max_rel_error, Tolerance(c.dtype)) << "rank " << comm.rank();
      EXPECT_EQ(a.rows_mismatch, 0) << "rank " << comm.rank();
    });
  });
}

// Sparse in, dense out (SyncInto): the sum written into a caller's buffer,
// zeros elsewhere, against the dense reference; then, divided, bit for bit
// each value of the same scheme's sorted result divided in float (what the
// contract promises), on the same scheme object and communicator.
TEST_P(AllSchemesTest, SyncIntoEqualsDenseReferenceAndDividedSum) {
  const Case& c = GetParam();
  const int64_t rows = c.width == 1 ? 20000 : 1500;
  if (!Sums(c, rows)) return;
  const std::vector<SparseTensor> inputs = Inputs(c, rows);
  const DenseReference reference(inputs);
  const Half16Check half(inputs, c.scheme, c.dtype);
  const SchemeRegistry registry = BuiltinSchemes();
  std::mutex mu;
  testing::RunRanks(c.backend, c.world, [&](Communicator& comm) {
    auto scheme = registry.Create(c.scheme);
    const SparseTensor& local = inputs[static_cast<size_t>(comm.rank())];
    WithValueType(c.dtype, [&]<typename T>() {
      using A = AccumOf<T>;
      // Garbage first: every element not in the union must be overwritten.
      std::vector<T> out(static_cast<size_t>(rows * c.width), Narrow<T>(A(7.5)));
      scheme->SyncInto(comm, local, std::span<T>(out));
      const Agreement a = reference.CompareDense(std::span<const T>(out));
      const size_t bad16 = Is16Bit(c.dtype) ? half.BadDense<T>(out) : 0;
      const std::vector<T> sum = scheme->Sync(comm, local).template ToDense<T>();
      const A divisor = static_cast<A>(c.world) + A(0.5);
      std::fill(out.begin(), out.end(), Narrow<T>(A(7.5)));
      scheme->SyncInto(comm, local, std::span<T>(out), divisor);
      size_t differ = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        // Divided in AccumOf<T>, rounded once.
        const T want = Narrow<T>(Widen(sum[i]) / divisor);
        if (std::memcmp(&want, &out[i], sizeof(T)) != 0) ++differ;
      }
      std::lock_guard lock(mu);
      EXPECT_EQ(bad16, 0u) << "rank " << comm.rank();
      EXPECT_LE(a.max_rel_error, Tolerance(c.dtype)) << "rank " << comm.rank();
      EXPECT_EQ(a.rows_mismatch, 0) << "rank " << comm.rank();
      EXPECT_EQ(differ, 0u) << "rank " << comm.rank() << ": elements not sum / " << divisor;
    });
  });
}

// A bad output or divisor on one rank is InvalidArgument on every rank
// (before any data moves), and the communicator serves the next call.
TEST(SyncInto, BadOutputOnOneRankRaisesOnEveryRank) {
  const int64_t rows = 1000;
  const std::vector<SparseTensor> inputs = GenerateSynthetic(
      ParseSyntheticSpec("zipf:rows=1000,width=2,density=0.05,skew=1.1,seed=9"), 3);
  const DenseReference reference(inputs);
  for (const std::string bad : {"size", "divisor", "overlap"}) {
    for (const std::string id : {"zen", "agsparse"}) {
      std::mutex mu;
      int raised = 0;
      testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
        auto scheme = BuiltinSchemes().Create(id);
        const SparseTensor& local = inputs[static_cast<size_t>(comm.rank())];
        std::vector<float> out(static_cast<size_t>(rows * 2));
        std::span<float> target(out);
        float divisor = 1.0f;
        // Rank 1's overlapping case: an input with every row present, whose
        // own values are given as the output (the right size: the overlap
        // is the only fault).
        const std::vector<float> ones(out.size(), 1.0f);
        SparseTensor full = SparseTensor::FromDense(ones, rows, 2, local.name());
        const SparseTensor* first = &local;
        if (comm.rank() == 1) {
          if (bad == "size") target = target.first(out.size() - 1);
          if (bad == "divisor") divisor = 0.0f;
          if (bad == "overlap") {
            target = full.mutable_values();
            first = &full;
          }
        }
        try {
          scheme->SyncInto(comm, *first, target, divisor);
        } catch (const InvalidArgument& e) {
          std::lock_guard lock(mu);
          ++raised;
          if (comm.rank() == 1) {
            EXPECT_NE(std::string(e.what()).find(bad == "size"      ? "dense output has"
                                                 : bad == "divisor" ? "divisor"
                                                                    : "overlaps"),
                      std::string::npos)
                << e.what();
          }
        }
        // The communicator is still usable.
        scheme->SyncInto(comm, local, out);
        const Agreement a = reference.CompareDense(out);
        std::lock_guard lock(mu);
        EXPECT_EQ(a.rows_mismatch, 0);
        EXPECT_LE(a.max_rel_error, 1e-5);
      });
      EXPECT_EQ(raised, 3) << id << ", bad " << bad;
    }
  }
}

std::vector<Case> Grid() {
  std::vector<Case> out;
  for (const std::string& scheme : BuiltinSchemes().ids()) {
    for (int world : {1, 2, 3, 5, 8}) {
      for (int64_t width : {1, 64}) {
        for (double density : {0.0, kOneRankEmpty, 1e-3, 0.3, 1.0}) {
          for (double skew : {0.0, 1.1}) {
            out.push_back({scheme, Backend::kInProc, world, width, density, skew});
          }
          // Real TCP on the skewed half of the grid.
          out.push_back({scheme, Backend::kGlooTcp, world, width, density, 1.1});
          // float64: the skewed half, in process.
          out.push_back({scheme, Backend::kInProc, world, width, density, 1.1, DType::kFloat64});
          // bfloat16 and float16: the skewed half, in process, at most 8
          // ranks (the inputs' sums stay exact in float).
          if (density != 0.0 && world > 1) {
            for (DType d : {DType::kBfloat16, DType::kFloat16}) {
              out.push_back({scheme, Backend::kInProc, world, width, density, 1.1, d});
            }
          }
        }
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, AllSchemesTest, ::testing::ValuesIn(Grid()), CaseName);

// Narrow rows of every width class the row copies treat apart (below 4
// floats, 4-16 in 16-byte pieces with an overlapping last one, above 16).
std::vector<Case> NarrowGrid() {
  std::vector<Case> out;
  for (const std::string& scheme : BuiltinSchemes().ids()) {
    for (int64_t width : {2, 3, 4, 5, 13, 16, 17}) {
      out.push_back({scheme, Backend::kInProc, 5, width, 0.05, 1.1});
      out.push_back({scheme, Backend::kInProc, 5, width, 0.05, 1.1, DType::kFloat64});
      out.push_back({scheme, Backend::kInProc, 5, width, 0.05, 1.1, DType::kBfloat16});
      out.push_back({scheme, Backend::kInProc, 5, width, 0.05, 1.1, DType::kFloat16});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Narrow, AllSchemesTest, ::testing::ValuesIn(NarrowGrid()), CaseName);

// Rows 20000 (width 1) or 3000 at the given density, skew 1.1.
SyntheticSpec SmallSpec(int64_t width, double density, uint64_t seed) {
  SyntheticSpec spec;
  spec.rows = width == 1 ? 20000 : 3000;
  spec.width = width;
  spec.density = density;
  spec.skew = 1.1;
  spec.seed = seed;
  return spec;
}

// A scheme whose entry says rank_order returns, on every rank, the ranks'
// values added in ascending rank order, bit for bit: the independent
// reference is that order written out, ((x0 + x1) + x2) + ..., per element.
TEST(RankOrder, SchemesThatSaySoSumInAscendingRankOrderBitForBit) {
  int flagged = 0;
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    if (!info.rank_order) continue;
    ++flagged;
    for (int world : {3, 4, 8}) {
      for (int64_t width : {1, 8}) {
        SCOPED_TRACE(info.id + " n=" + std::to_string(world) + " width " + std::to_string(width));
        const std::vector<SparseTensor> inputs =
            GenerateSynthetic(SmallSpec(width, 0.3, 17), world);
        std::vector<float> want = inputs[0].ToDense();
        for (int r = 1; r < world; ++r) {
          const std::vector<float> x = inputs[static_cast<size_t>(r)].ToDense();
          for (size_t e = 0; e < want.size(); ++e) want[e] = want[e] + x[e];
        }
        std::mutex mu;
        testing::RunRanks(Backend::kInProc, world, [&](Communicator& comm) {
          const std::vector<float> got =
              info.factory({})->Sync(comm, inputs[static_cast<size_t>(comm.rank())]).ToDense();
          std::lock_guard lock(mu);
          ASSERT_EQ(got.size(), want.size());
          int64_t differ = 0;
          for (size_t e = 0; e < want.size(); ++e) {
            differ += std::bit_cast<uint32_t>(got[e]) != std::bit_cast<uint32_t>(want[e]);
          }
          EXPECT_EQ(differ, 0) << "rank " << comm.rank();
        });
      }
    }
  }
  EXPECT_GE(flagged, 1);
}


// Input that views the caller's memory (SparseTensor::View, what the Python
// bindings pass for sorted ids) sums bit for bit as the same rows owned, for
// every scheme, sparse and dense output; the caller's arrays are left as
// they were, and no result refers to them (one rank included, where a
// scheme returns its input).
TEST(ViewInput, EverySchemeSumsAViewAsTheOwnedRowsAndNeverReturnsIt) {
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    for (int world : {1, 4}) {
      for (int64_t width : {1, 8}) {
        SCOPED_TRACE(info.id + " n=" + std::to_string(world) + " width " + std::to_string(width));
        const SyntheticSpec spec = SmallSpec(width, 0.05, 23);
        const std::vector<SparseTensor> owned = GenerateSynthetic(spec, world);
        std::mutex mu;
        testing::RunRanks(Backend::kInProc, world, [&](Communicator& comm) {
          const SparseTensor& mine = owned[static_cast<size_t>(comm.rank())];
          const std::vector<int64_t> ids(mine.ids().begin(), mine.ids().end());
          const std::vector<float> values(mine.values().begin(), mine.values().end());
          const SparseTensor view = SparseTensor::View(mine.rows(), width, ids, values);
          auto scheme = info.factory({});
          const SparseTensor want = scheme->Sync(comm, mine);
          const SparseTensor got = scheme->Sync(comm, view);
          std::vector<float> want_dense(static_cast<size_t>(spec.rows * width), 3.0f);
          std::vector<float> got_dense(want_dense.size(), 5.0f);
          scheme->SyncInto(comm, mine, want_dense);
          scheme->SyncInto(comm, view, got_dense);
          std::lock_guard lock(mu);
          EXPECT_FALSE(got.is_view()) << "rank " << comm.rank();
          EXPECT_TRUE(std::ranges::equal(got.ids(), want.ids())) << "rank " << comm.rank();
          EXPECT_EQ(std::memcmp(got.values().data(), want.values().data(),
                                want.values().size_bytes()),
                    0)
              << "rank " << comm.rank();
          EXPECT_EQ(got.values().size(), want.values().size());
          EXPECT_EQ(std::memcmp(got_dense.data(), want_dense.data(), want_dense.size() * 4), 0)
              << "rank " << comm.rank();
          EXPECT_TRUE(std::ranges::equal(ids, mine.ids()));
          EXPECT_TRUE(std::ranges::equal(values, mine.values()));
        });
      }
    }
  }
}

// float64 is summed in float64 by every scheme that declares it: 1e10 + 1 -
// 1e10 is 1 (0 in float32) and 1e300 + 1e-300 keeps both (inf and 0 in
// float32), sparse, dense and dense-output, on 3 ranks.
TEST(Float64, EverySchemeThatDeclaresItSumsInFloat64) {
  int declared = 0;
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    if (!info.capabilities.Sums(DType::kFloat64)) continue;
    ++declared;
    SCOPED_TRACE(info.id);
    // Rows 5 and 7 of width 2: rank 0 {1e10, 1e300}, rank 1 {1, 0} and
    // {1e-300, 2}, rank 2 {-1e10, 0}.
    const std::vector<std::vector<int64_t>> ids = {{5}, {5, 7}, {5}};
    const std::vector<std::vector<double>> values = {
        {1e10, 1e300}, {1.0, 0.0, 1e-300, 2.0}, {-1e10, 0.0}};
    const std::vector<double> want = {1.0, 1e300, 1e-300, 2.0};
    std::mutex mu;
    testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
      const size_t r = static_cast<size_t>(comm.rank());
      const SparseTensor local = SparseTensor::FromSorted(10, 2, ids[r], values[r], "t");
      auto scheme = info.factory({});
      const SparseTensor sum = scheme->Sync(comm, local);
      std::vector<double> dense = local.ToDense<double>();
      scheme->SyncDense(comm, dense, 10, 2, "d");
      std::vector<double> into(20, 9.0);
      scheme->SyncInto(comm, local, into);
      std::lock_guard lock(mu);
      ASSERT_EQ(sum.dtype(), DType::kFloat64);
      EXPECT_TRUE(std::ranges::equal(sum.ids(), std::vector<int64_t>{5, 7}));
      EXPECT_TRUE(std::ranges::equal(sum.values<double>(), want)) << "rank " << r;
      for (const std::vector<double>* got : {&dense, &into}) {
        EXPECT_EQ((*got)[10], want[0]);
        EXPECT_EQ((*got)[11], want[1]);
        EXPECT_EQ((*got)[14], want[2]);
        EXPECT_EQ((*got)[15], want[3]);
        EXPECT_EQ(std::count(got->begin(), got->end(), 0.0), 16);
      }
    });
  }
  EXPECT_GE(declared, 5);
}

// Ranks that hold different dtypes raise MismatchError on every rank (the
// metadata record carries the dtype) and the communicator serves the next
// call.
TEST(Float64, RanksWithDifferentDtypesRaiseMismatchOnEveryRank) {
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    if (!info.capabilities.Sums(DType::kFloat64)) continue;
    SCOPED_TRACE(info.id);
    std::mutex mu;
    int raised = 0;
    testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
      auto scheme = info.factory({});
      const SparseTensor f32 = SparseTensor::FromSorted(10, 1, {3}, {1.0f}, "t");
      const SparseTensor f64 = SparseTensor::FromSorted(10, 1, {3}, std::vector<double>{1.0}, "t");
      try {
        scheme->Sync(comm, comm.rank() == 1 ? f64 : f32);
      } catch (const MismatchError& e) {
        std::lock_guard lock(mu);
        ++raised;
        EXPECT_NE(std::string(e.what()).find("dtype"), std::string::npos) << e.what();
      }
      const SparseTensor sum = scheme->Sync(comm, f64);
      std::lock_guard lock(mu);
      EXPECT_EQ(sum.values<double>()[0], 3.0);
    });
    EXPECT_EQ(raised, 3);
  }
}

// The schemes that take a sum order on float64 buffers add each element's
// values in that order, bit for bit: the reference writes the order out.
TEST(Float64, SumOrderOnFloat64IsFollowedBitForBit) {
  int declared = 0;
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    if (!info.capabilities.Orders(DType::kFloat64)) continue;
    ++declared;
    for (int world : {2, 3, 4}) {
      SCOPED_TRACE(info.id + " n=" + std::to_string(world));
      const size_t total = 1000;
      std::vector<SumStep> order = {{0, 1 % world}, {100, world - 1}, {250, 0}, {600, 2 % world},
                                    {601, 1 % world}};
      std::vector<std::vector<double>> x(static_cast<size_t>(world), std::vector<double>(total));
      for (int r = 0; r < world; ++r) {
        for (size_t e = 0; e < total; ++e) {
          x[static_cast<size_t>(r)][e] =
              std::ldexp(1.0 + static_cast<double>((e * 7919 + static_cast<size_t>(r) * 104729) % 1000) / 997,
                         static_cast<int>((e + static_cast<size_t>(r) * 13) % 60) - 30);
        }
      }
      std::vector<double> want(total);
      for (size_t e = 0; e < total; ++e) {
        size_t step = 0;
        while (step + 1 < order.size() && static_cast<size_t>(order[step + 1].first) <= e) ++step;
        const int start = order[step].second;
        double acc = x[static_cast<size_t>(start)][e];
        for (int k = 1; k < world; ++k) {
          acc = acc + x[static_cast<size_t>((start - k + world) % world)][e];
        }
        want[e] = acc;
      }
      std::mutex mu;
      testing::RunRanks(Backend::kInProc, world, [&](Communicator& comm) {
        std::vector<double> buffer = x[static_cast<size_t>(comm.rank())];
        SyncOptions options;
        options.sum_order = order;
        info.factory({})->SyncDense(comm, buffer, static_cast<int64_t>(total), 1, "b", options);
        std::lock_guard lock(mu);
        int64_t differ = 0;
        for (size_t e = 0; e < total; ++e) {
          differ += std::bit_cast<uint64_t>(buffer[e]) != std::bit_cast<uint64_t>(want[e]);
        }
        EXPECT_EQ(differ, 0) << "rank " << comm.rank();
      });
    }
  }
  EXPECT_GE(declared, 1);
}

// The schemes that take a sum order on 16-bit buffers add each element's
// values in that order, each addition in float rounded to 16 bits (what
// Gloo's and NCCL's rings do), bit for bit: the reference writes it out.
TEST(Half16, SumOrderOn16BitIsFollowedBitForBit) {
  int declared = 0;
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    for (DType dtype : {DType::kBfloat16, DType::kFloat16}) {
      if (!info.capabilities.Orders(dtype)) continue;
      ++declared;
      WithValueType(dtype, [&]<typename T>() {
        for (int world : {2, 3, 4}) {
          SCOPED_TRACE(info.id + " " + DTypeName(dtype) + " n=" + std::to_string(world));
          const size_t total = 700;
          const std::vector<SumStep> order = {{0, 1 % world}, {90, world - 1}, {250, 0},
                                              {500, 2 % world}, {501, 1 % world}};
          std::vector<std::vector<T>> x(static_cast<size_t>(world), std::vector<T>(total));
          for (int r = 0; r < world; ++r) {
            for (size_t e = 0; e < total; ++e) {
              const double m = 1.0 + static_cast<double>((e * 7919 + static_cast<size_t>(r) * 104729) % 1000) / 997;
              x[static_cast<size_t>(r)][e] = Narrow<T>(static_cast<float>(
                  std::ldexp(m, static_cast<int>((e + static_cast<size_t>(r) * 13) % 12) - 6)));
            }
          }
          std::vector<T> want(total);
          for (size_t e = 0; e < total; ++e) {
            size_t step = 0;
            while (step + 1 < order.size() && static_cast<size_t>(order[step + 1].first) <= e) ++step;
            const int start = order[step].second;
            float acc = Widen(x[static_cast<size_t>(start)][e]);
            for (int k = 1; k < world; ++k) {
              // Rounded to 16 bits after every addition.
              acc = Widen(Narrow<T>(acc + Widen(x[static_cast<size_t>((start - k + world) % world)][e])));
            }
            want[e] = Narrow<T>(acc);
          }
          std::mutex mu;
          testing::RunRanks(Backend::kInProc, world, [&](Communicator& comm) {
            std::vector<T> buffer = x[static_cast<size_t>(comm.rank())];
            SyncOptions options;
            options.sum_order = order;
            info.factory({})->SyncDense(comm, std::span<T>(buffer), static_cast<int64_t>(total), 1,
                                        "b", options);
            std::lock_guard lock(mu);
            int64_t differ = 0;
            for (size_t e = 0; e < total; ++e) differ += !(buffer[e] == want[e]);
            EXPECT_EQ(differ, 0) << "rank " << comm.rank();
          });
        }
      });
    }
  }
  EXPECT_GE(declared, 2);
}

// Ranks with bfloat16 and float16 tensors (the same size) raise
// MismatchError on every rank, and the communicator serves the next call.
TEST(Half16, RanksWithDifferent16BitDtypesRaiseMismatchOnEveryRank) {
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    if (!info.capabilities.Sums(DType::kBfloat16) || !info.capabilities.Sums(DType::kFloat16)) {
      continue;
    }
    SCOPED_TRACE(info.id);
    std::mutex mu;
    int raised = 0;
    testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
      auto scheme = info.factory({});
      const SparseTensor bf = SparseTensor::FromSorted(
          10, 1, {3}, std::vector<Bfloat16>{Narrow<Bfloat16>(1.0f)}, "t");
      const SparseTensor fp = SparseTensor::FromSorted(
          10, 1, {3}, std::vector<Float16>{Narrow<Float16>(1.0f)}, "t");
      try {
        scheme->Sync(comm, comm.rank() == 1 ? fp : bf);
      } catch (const MismatchError& e) {
        std::lock_guard lock(mu);
        ++raised;
        EXPECT_NE(std::string(e.what()).find("dtype"), std::string::npos) << e.what();
      }
      const SparseTensor sum = scheme->Sync(comm, fp);
      std::lock_guard lock(mu);
      EXPECT_EQ(Widen(sum.values<Float16>()[0]), 3.0f);
    });
    EXPECT_EQ(raised, 3);
  }
}

// Wire values other than float32 are for float32 tensors: asked of a
// 16-bit tensor they are InvalidArgument on every rank naming both.
TEST(Half16, WireValuesOnA16BitTensorAreInvalidOnEveryRank) {
  for (const std::string& id : BuiltinSchemes().ids()) {
    SCOPED_TRACE(id);
    std::mutex mu;
    int raised = 0;
    testing::RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
      auto scheme = BuiltinSchemes().Create(id);
      const SparseTensor bf = SparseTensor::FromSorted(
          10, 1, {3}, std::vector<Bfloat16>{Narrow<Bfloat16>(1.0f)}, "t");
      SyncOptions options;
      options.values = WireValues::kFloat16;
      try {
        scheme->Sync(comm, bf, options);
      } catch (const InvalidArgument& e) {
        std::lock_guard lock(mu);
        ++raised;
        EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("float16 values on the wire"), std::string::npos)
            << e.what();
      }
    });
    EXPECT_EQ(raised, 2);
  }
}

}  // namespace
}  // namespace zen
