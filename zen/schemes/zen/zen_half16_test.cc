// `zen` on bfloat16 and float16 tensors: sent at their own width, summed by
// each row's owner in float32 and rounded once when it stores the sum.
// Sync, SyncInto and SyncDense on 1..8 ranks, element-sparse and wide rows
// (the grouped pull), skewed, empty and dense inputs, hash and range
// ownership, every pull encoding; -0 elements, and values whose sum a
// rounding per addition would lose (bfloat16 256 + 1 + 1 = 258, float16
// 2048 + 1 + 1 = 2050: 256 and 2048 after each addition). Each result is
// compared bit for bit with the reference written here: the float32 sum of
// the widened inputs in rank order (zen's servers add contributions in
// rank order), narrowed once.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "zen/core/error.h"
#include "zen/schemes/zen/zen.h"
#include "zen/testing/ranks.h"

namespace zen {
namespace {

using testing::Backend;

enum class Input { kSkewed, kOneRankEmpty, kAllEmpty, kDense };

std::string InputName(Input in) {
  switch (in) {
    case Input::kSkewed: return "skewed";
    case Input::kOneRankEmpty: return "oneempty";
    case Input::kAllEmpty: return "allempty";
    case Input::kDense: return "dense";
  }
  return "?";
}

template <typename T>
uint16_t Bits(T v) {
  return std::bit_cast<uint16_t>(v);
}

// The value a rounding per addition loses: 2^8 for bfloat16 (8 significant
// bits), 2^11 for float16 (11).
template <typename T>
float Big() {
  return std::is_same_v<T, Bfloat16> ? 256.0f : 2048.0f;
}

// Per rank, a tensor of T of `rows` x `width`: values in [-4, 4], with
// Big<T>() on rank 0 and 1 on the others now and then, and -0 in some
// elements (never the first of a row, so every listed row is non-zero and
// the dense path lists the same rows).
template <typename T>
std::vector<SparseTensor> MakeInputs(int world, int64_t rows, int64_t width, Input in,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<SparseTensor> out;
  for (int r = 0; r < world; ++r) {
    std::map<int64_t, bool> picked;
    const bool empty = in == Input::kAllEmpty || (in == Input::kOneRankEmpty && r == world / 2);
    if (!empty) {
      const int64_t want = in == Input::kDense ? rows : std::max<int64_t>(1, rows / 8);
      for (int64_t k = 0; k < want; ++k) {
        const float u = unit(rng);  // u^4: most ids near 0 (hot rows on every rank)
        const int64_t id =
            in == Input::kDense
                ? k
                : std::min<int64_t>(rows - 1,
                                    static_cast<int64_t>(u * u * u * u * static_cast<float>(rows)));
        picked[id] = true;
      }
    }
    std::vector<int64_t> ids;
    std::vector<T> values;
    for (const auto& [id, unused] : picked) {
      ids.push_back(id);
      for (int64_t c = 0; c < width; ++c) {
        float v = (unit(rng) - 0.5f) * 8.0f;
        if (v == 0.0f) v = 1.0f;
        if ((id + c) % 5 == 0) v = r == 0 ? Big<T>() : 1.0f;
        if (c > 0 && (id + c + r) % 7 == 3) v = -0.0f;
        values.push_back(Narrow<T>(v));
      }
    }
    out.push_back(SparseTensor::FromSorted<T>(rows, width, std::move(ids), std::move(values),
                                              "h16"));
  }
  return out;
}

// The float32 sum in rank order of the widened inputs, narrowed once, dense
// (rows no rank lists: +0).
template <typename T>
std::vector<T> RankOrderSum(const std::vector<SparseTensor>& inputs) {
  const int64_t rows = inputs[0].rows(), width = inputs[0].width();
  const size_t w = static_cast<size_t>(width);
  std::vector<float> sum(static_cast<size_t>(rows) * w, 0.0f);
  std::vector<bool> seen(static_cast<size_t>(rows), false);
  for (const SparseTensor& t : inputs) {
    const std::span<const T> v = t.values<T>();
    for (size_t i = 0; i < t.nnz(); ++i) {
      const size_t id = static_cast<size_t>(t.ids()[i]);
      for (size_t c = 0; c < w; ++c) {
        const float x = Widen(v[i * w + c]);
        sum[id * w + c] = seen[id] ? sum[id * w + c] + x : x;
      }
      seen[id] = true;
    }
  }
  std::vector<T> out(sum.size());
  for (size_t k = 0; k < sum.size(); ++k) out[k] = Narrow<T>(sum[k]);
  return out;
}

template <typename T>
void ExpectSameBits(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(Bits(got[k]), Bits(want[k])) << what << " element " << k;
  }
}

struct Case {
  DType dtype;
  int world;
  int64_t width;
  Input input;
  ZenOwnership ownership = ZenOwnership::kHash;
  EncodingChoice pull = EncodingChoice::kAuto;
  int64_t rows = 0;  // 0: 5000 for width 1, else 300
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* pulls[] = {"auto", "coo", "bitmap", "coo32", "compact", "ef"};
  std::string name = DTypeName(c.dtype);
  name += "_n" + std::to_string(c.world) + "_w" + std::to_string(c.width) + "_" +
          InputName(c.input);
  if (c.ownership == ZenOwnership::kRange) name += "_range";
  name += "_";
  name += pulls[static_cast<int>(c.pull)];
  if (c.rows != 0) name += "_r" + std::to_string(c.rows);
  return name;
}

class ZenHalf16 : public ::testing::TestWithParam<Case> {};

template <typename T>
void SumsOnceInFloat32(const Case& c) {
  const int64_t rows = c.rows != 0 ? c.rows : c.width == 1 ? 5000 : 300;
  const std::vector<SparseTensor> inputs =
      MakeInputs<T>(c.world, rows, c.width, c.input, 11 + static_cast<uint64_t>(c.world));
  const std::vector<T> want = RankOrderSum<T>(inputs);
  std::vector<T> halved_want(want.size());
  for (size_t k = 0; k < want.size(); ++k) halved_want[k] = Narrow<T>(Widen(want[k]) / 2.0f);
  std::mutex mu;
  testing::RunRanks(Backend::kInProc, c.world, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    ZenConfig config;
    config.ownership = c.ownership;
    config.pull_encoding = c.pull;
    ZenScheme scheme({}, config);
    const SparseTensor sum = scheme.Sync(comm, inputs[r]);
    std::vector<T> into(want.size(), Narrow<T>(7.0f));
    scheme.SyncInto(comm, inputs[r], std::span<T>(into));
    std::vector<T> halved(want.size(), Narrow<T>(7.0f));
    scheme.SyncInto(comm, inputs[r], std::span<T>(halved), 2.0f);
    std::vector<T> dense = inputs[r].ToDense<T>();
    scheme.SyncDense(comm, std::span<T>(dense), rows, c.width, "dense");
    std::lock_guard lock(mu);
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(sum.dtype(), DTypeOf<T>);
    ExpectSameBits(sum.ToDense<T>(), want, "Sync");
    ExpectSameBits(into, want, "SyncInto");
    ExpectSameBits(halved, halved_want, "SyncInto / 2");
    ExpectSameBits(dense, want, "SyncDense");
  });
}

TEST_P(ZenHalf16, SumsOnceInFloat32) {
  const Case c = GetParam();
  if (c.dtype == DType::kBfloat16) {
    SumsOnceInFloat32<Bfloat16>(c);
  } else {
    SumsOnceInFloat32<Float16>(c);
  }
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const DType d : {DType::kBfloat16, DType::kFloat16}) {
    for (const int n : {1, 2, 3, 5, 8}) {
      for (const int64_t w : {int64_t{1}, int64_t{4}, int64_t{33}}) {
        for (const Input in : {Input::kSkewed, Input::kOneRankEmpty, Input::kDense}) {
          out.push_back({d, n, w, in});
        }
      }
    }
    // Width 1 over enough rows for permuted blocks (ElementBlockBits > 0).
    out.push_back({d, 2, 1, Input::kSkewed, ZenOwnership::kHash, EncodingChoice::kAuto, 1 << 16});
    for (const int64_t w : {int64_t{1}, int64_t{8}}) {
      out.push_back({d, 3, w, Input::kAllEmpty});
      out.push_back({d, 4, w, Input::kSkewed, ZenOwnership::kRange});
      for (const EncodingChoice e : {EncodingChoice::kCoo, EncodingChoice::kHashBitmap,
                                     EncodingChoice::kCoo32, EncodingChoice::kEliasFano}) {
        out.push_back({d, 3, w, Input::kSkewed, ZenOwnership::kHash, e});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, ZenHalf16, ::testing::ValuesIn(Cases()), CaseName);

// 3 ranks, one row: bfloat16 256 + 1 + 1 and float16 2048 + 1 + 1 are 258
// and 2050 rounded once (a rounding after each addition gives 256 and
// 2048); the row's other element is -0 on every rank: -0.
template <typename T>
void RoundsOnce() {
  std::mutex mu;
  testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
    ZenScheme scheme;
    const float first = comm.rank() == 0 ? Big<T>() : 1.0f;
    const SparseTensor local = SparseTensor::FromSorted<T>(
        4, 2, {2}, std::vector<T>{Narrow<T>(first), Narrow<T>(-0.0f)}, "once");
    const SparseTensor sum = scheme.Sync(comm, local);
    std::vector<T> dense = local.ToDense<T>();
    scheme.SyncDense(comm, std::span<T>(dense), 4, 2, "once");
    std::lock_guard lock(mu);
    ASSERT_EQ(sum.nnz(), 1u);
    EXPECT_EQ(Widen(sum.values<T>()[0]), Big<T>() + 2.0f);
    EXPECT_EQ(Bits(sum.values<T>()[1]), 0x8000);
    EXPECT_EQ(Widen(dense[4]), Big<T>() + 2.0f);
    EXPECT_EQ(Bits(dense[5]), 0x8000);
  });
}

TEST(ZenHalf16Values, RoundsOnce) {
  RoundsOnce<Bfloat16>();
  RoundsOnce<Float16>();
}

// A sum order on a dense call: each addition rounded to the dtype, in the
// order given (as the ordered ring and Gloo do): 1 + 1 + 256 from rank 2
// down is 258 in bfloat16, 256 + 1 + 1 from rank 0 up (rank 0 first, then
// the ring's order n-1, ..., 1) is 256.
TEST(ZenHalf16Values, SumOrderRoundsEachAddition) {
  std::mutex mu;
  for (const int first : {0, 2}) {
    testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
      ZenScheme scheme;
      std::vector<Bfloat16> dense(4, Narrow<Bfloat16>(0.0f));
      dense[1] = Narrow<Bfloat16>(comm.rank() == 0 ? 256.0f : 1.0f);
      SyncOptions options;
      const std::vector<std::pair<int64_t, int>> order = {{0, first}};
      options.sum_order = order;
      scheme.SyncDense(comm, std::span<Bfloat16>(dense), 4, 1, "ordered", options);
      std::lock_guard lock(mu);
      // first 0: 256, then 1 (rank 2), then 1 (rank 1): 256 each step.
      // first 2: 1 (rank 2) + 1 (rank 1) = 2, + 256 = 258.
      EXPECT_EQ(Widen(dense[1]), first == 0 ? 256.0f : 258.0f) << "first " << first;
    });
  }
}

// Half-width wire values are float32's: a bfloat16 call asking for them is
// InvalidArgument on every rank.
TEST(ZenHalf16Values, NarrowWireValuesAreRefusedOnEveryRank) {
  std::mutex mu;
  int raised = 0;
  testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
    ZenScheme scheme;
    const SparseTensor local = SparseTensor::FromSorted<Bfloat16>(
        10, 2, {comm.rank()}, std::vector<Bfloat16>{Narrow<Bfloat16>(1.0f), Narrow<Bfloat16>(2.0f)},
        "t");
    SyncOptions options;
    options.values = WireValues::kBfloat16;
    try {
      scheme.Sync(comm, local, options);
    } catch (const InvalidArgument& e) {
      std::lock_guard lock(mu);
      ++raised;
      EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos) << e.what();
    }
    const SparseTensor sum = scheme.Sync(comm, local);
    std::lock_guard lock(mu);
    EXPECT_EQ(sum.nnz(), 3u);
  });
  EXPECT_EQ(raised, 3);
}

// Every dtype in turn on one object (one workspace): each sums in its own
// way, the float32 element path included.
TEST(ZenHalf16Values, DtypesAlternateOnOneObject) {
  std::mutex mu;
  testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
    ZenScheme scheme;
    const int64_t r = comm.rank();
    for (int round = 0; round < 2; ++round) {
      for (const int64_t width : {int64_t{1}, int64_t{16}}) {
        const std::vector<int64_t> ids = {r, 10 + r, 40};
        const size_t n = ids.size() * static_cast<size_t>(width);
        const float x = r == 0 ? 256.0f : 1.0f;
        const SparseTensor b = scheme.Sync(
            comm, SparseTensor::FromSorted<Bfloat16>(64, width, ids,
                                                     std::vector<Bfloat16>(n, Narrow<Bfloat16>(x)),
                                                     "b"));
        const SparseTensor f = scheme.Sync(
            comm, SparseTensor::FromSorted<float>(64, width, ids, std::vector<float>(n, x), "f"));
        const SparseTensor h = scheme.Sync(
            comm, SparseTensor::FromSorted<Float16>(64, width, ids,
                                                    std::vector<Float16>(n, Narrow<Float16>(x)),
                                                    "h"));
        std::lock_guard lock(mu);
        // Row 40 (the last): 256 + 1 + 1 on every element.
        EXPECT_EQ(Widen(b.values<Bfloat16>()[n / 3 * 7 - 1]), 258.0f);
        EXPECT_EQ(f.values<float>()[n / 3 * 7 - 1], 258.0f);
        EXPECT_EQ(Widen(h.values<Float16>()[n / 3 * 7 - 1]), 258.0f);
      }
    }
  });
}

}  // namespace
}  // namespace zen
