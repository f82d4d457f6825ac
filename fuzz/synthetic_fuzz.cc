// libFuzzer target: the `--synthetic` spec parser (zen/workload/synthetic.h)
// on the input as text, e.g. "zipf:rows=1e300,width=-3,seed=inf". Accepted:
// InvalidArgument. A spec that parses must be valid (rows, width >= 1 with
// rows x width in int64, density in [0, 1], skew >= 0), print (ToString) to
// a spec that parses to the same integers, and, where small, generate a
// tensor of its shape with round(density x rows) rows. Anything else (UB
// in a conversion, an escaped std:: exception, a crash) is a finding.
#include <cmath>
#include <limits>
#include <string>

#include "fuzz/fuzz_cases.h"
#include "zen/workload/synthetic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 4096));
  zen::SyntheticSpec s;
  try {
    s = zen::ParseSyntheticSpec(text);
  } catch (const zen::InvalidArgument&) {
    return 0;
  }
  using zen::fuzz::Fail;
  if (s.rows < 1 || s.width < 1) Fail("parsed a spec with rows or width < 1");
  if (static_cast<__int128>(s.rows) * s.width > std::numeric_limits<int64_t>::max()) {
    Fail("parsed a spec whose rows x width overflows int64");
  }
  if (!(s.density >= 0 && s.density <= 1)) Fail("parsed a density outside [0, 1]");
  if (!(s.skew >= 0)) Fail("parsed a negative or NaN skew");
  zen::SyntheticSpec again;
  try {
    again = zen::ParseSyntheticSpec(zen::ToString(s));
  } catch (const zen::InvalidArgument& e) {
    Fail(std::string("ToString of a parsed spec does not parse: ") + e.what());
  }
  if (again.kind != s.kind || again.rows != s.rows || again.width != s.width ||
      again.seed != s.seed) {
    Fail("ToString does not round-trip rows, width or seed");
  }
  if (s.rows <= 4096 && s.width <= 64) {
    const zen::SparseTensor t = zen::GenerateSyntheticRank(s, 1);
    zen::fuzz::CheckTensor(t, s.rows, s.width);
    const auto want = static_cast<size_t>(
        std::min<double>(static_cast<double>(s.rows),
                         std::llround(s.density * static_cast<double>(s.rows))));
    if (t.nnz() != want) Fail("generated nnz is not round(density x rows)");
  }
  return 0;
}
