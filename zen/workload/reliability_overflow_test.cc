// Size arithmetic of the workload layer near int64 limits (issue 13, item
// 2): trace headers whose rows x width overflow, traces of huge but sparse
// tensors, and --synthetic specs with numbers beyond int64 or shapes whose
// generator cannot fit in memory. Every failure is a zen error naming what
// is wrong; never a wrapped size, UB, std::bad_alloc or std::length_error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <new>
#include <stdexcept>

#include "zen/core/error.h"
#include "zen/workload/synthetic.h"
#include "zen/workload/trace.h"

namespace zen {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("zen_workload_overflow_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A sparse tensor of 2^62 rows travels through a trace exactly: the format
// and the reader size everything by the non-zeros.
TEST(ReliabilityOverflowWorkloadTest, TraceOfHugeSparseTensorsRoundTrips) {
  const int64_t rows = int64_t{1} << 62;
  Trace t;
  t.world_size = 2;
  t.Add("step0.emb", {SparseTensor::FromCoo(rows, 1, {0, rows - 1}, {1, 2}),
                      SparseTensor::FromCoo(rows, 1, {rows / 2}, {3})});
  const std::string path = TempPath("huge.safetensors");
  WriteTrace(path, t);
  const Trace back = ReadTrace(path);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].rows, rows);
  EXPECT_EQ(back.Get("step0.emb", 0).ids()[1], rows - 1);
  EXPECT_EQ(back.Get("step0.emb", 1).ids()[0], rows / 2);
  std::filesystem::remove(path);
}

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::bad_alloc& e) {
    return std::string("escaped std::bad_alloc: ") + e.what();
  } catch (const std::length_error& e) {
    return std::string("escaped std::length_error: ") + e.what();
  }
  return "";
}

// Before: rows=1e300 and rows=inf went through static_cast<int64_t>(double),
// which is undefined behaviour (UBSan: "outside the range of representable
// values"); the result was whatever the CPU gave (INT64_MIN on x86).
TEST(ReliabilityOverflowWorkloadTest, SyntheticNumbersBeyondInt64AreRejected) {
  for (const char* spec : {"zipf:rows=1e300", "zipf:rows=inf", "zipf:rows=-inf",
                           "zipf:rows=9.3e18", "zipf:width=1e19", "zipf:seed=1e20",
                           "zipf:rows=nan"}) {
    EXPECT_THAT(ErrorOf([&] { ParseSyntheticSpec(spec); }), HasSubstr("synthetic")) << spec;
  }
  EXPECT_THAT(ErrorOf([] { ParseSyntheticSpec("zipf:rows=1e300"); }),
              HasSubstr("rows=1e300 is outside the int64 range"));
  // 2^62 x 4 elements: beyond int64.
  EXPECT_THAT(ErrorOf([] { ParseSyntheticSpec("zipf:rows=4611686018427387904,width=4"); }),
              HasSubstr("overflows int64"));
  // The largest values that fit are accepted by the parser.
  EXPECT_EQ(ParseSyntheticSpec("zipf:rows=9223372036854775807,width=1").rows,
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ParseSyntheticSpec("zipf:rows=4e18,width=2").rows, int64_t{4000000000000000000});
}

// Before: seed=-1 parsed to 2^64 - 1, which ToString printed and the parser
// then rejected (from_chars into int64 overflowed, the double path cast
// 1.8e19 to int64: UB). Every printed spec parses back to the same spec.
TEST(ReliabilityOverflowWorkloadTest, SyntheticSpecsRoundTripThroughToString) {
  for (const char* text : {"zipf:seed=-1", "zipf:seed=18446744073709551615",
                           "zipf:rows=9223372036854775807,width=1,seed=9223372036854775808"}) {
    const SyntheticSpec s = ParseSyntheticSpec(text);
    const SyntheticSpec back = ParseSyntheticSpec(ToString(s));
    EXPECT_EQ(back.seed, s.seed) << text;
    EXPECT_EQ(back.rows, s.rows) << text;
  }
  EXPECT_EQ(ParseSyntheticSpec("zipf:seed=-1").seed, std::numeric_limits<uint64_t>::max());
}

// Generating a spec that cannot fit in memory is a zen error naming rank
// and spec, not std::bad_alloc (rows 2^62 need 2^66 bytes of sampling keys;
// density 1 of 2^62 rows needs 2^65 bytes of ids); and llround(density x
// rows) is never asked for 2^63.
TEST(ReliabilityOverflowWorkloadTest, SyntheticGeneratorOutOfMemoryIsAZenError) {
  SyntheticSpec s;
  // Sampling needs memory in proportion to the rows drawn (not to rows):
  // 2^62 x 1e-3 of them cannot fit.
  s.rows = int64_t{1} << 62;
  s.width = 1;
  s.density = 1e-3;
  std::string e = ErrorOf([&] { GenerateSyntheticRank(s, 3); });
  EXPECT_THAT(e, HasSubstr("rank 3, tensor 'synthetic'"));
  EXPECT_THAT(e, HasSubstr("sampling keys"));
  s.density = 1;
  s.rows = std::numeric_limits<int64_t>::max();
  e = ErrorOf([&] { GenerateSyntheticRank(s, 0); });
  EXPECT_THAT(e, HasSubstr("rank 0, tensor 'synthetic'"));
  EXPECT_THAT(e, HasSubstr("ids of every row"));
}

}  // namespace
}  // namespace zen
