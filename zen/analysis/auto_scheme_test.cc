// `auto`: exact results over repeated calls, steady-state cost equal to the
// delegate's, forcing by option and by ZEN_SCHEME, the ZEN_LOG table, and
// AllSchemes().
#include "zen/analysis/auto_scheme.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>

#include "zen/comm/testing.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

TEST(AutoSchemeTest, ExactOverCallsAndSteadyStateCostsTheDelegate) {
  const auto inputs = GenerateSynthetic(
      ParseSyntheticSpec("zipf:rows=5000,width=8,density=0.02,skew=1.1,seed=3"), 4);
  const DenseReference reference(inputs);
  std::mutex mu;
  std::vector<uint64_t> auto_bytes(4), delegate_bytes(4);
  std::string chosen;
  testing::RunRanks(Backend::kInProc, 4, [&](Communicator& comm) {
    AutoOptions options;
    options.profiler.schedule = {/*warmup_calls=*/1, /*every=*/0};
    AutoScheme scheme(BuiltinSchemes(), options);
    const size_t r = static_cast<size_t>(comm.rank());
    for (int call = 0; call < 3; ++call) {
      comm.ResetCounters();
      const Agreement a = reference.Compare(scheme.Sync(comm, inputs[r]));
      std::lock_guard lock(mu);
      EXPECT_LE(a.max_rel_error, 1e-5);
      EXPECT_EQ(a.rows_mismatch, 0);
    }
    auto_bytes[r] = comm.counters().total_recv();  // call 2: no profiling
    const std::string id = scheme.decision(inputs[r].name())->chosen;
    comm.ResetCounters();
    BuiltinSchemes().Create(id)->Sync(comm, inputs[r]);
    delegate_bytes[r] = comm.counters().total_recv();
    std::lock_guard lock(mu);
    chosen = id;
  });
  EXPECT_EQ(auto_bytes, delegate_bytes) << "auto chose " << chosen;
}

TEST(AutoSchemeTest, ForcedByOptionOrEnvironmentAndLogs) {
  const auto inputs =
      GenerateSynthetic(ParseSyntheticSpec("zipf:rows=800,width=4,density=0.05"), 2);
  std::vector<std::string> chosen(2);
  testing::RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
    AutoOptions options;
    options.force = "sparse_ps";
    AutoScheme scheme(BuiltinSchemes(), options);
    scheme.Sync(comm, inputs[static_cast<size_t>(comm.rank())]);
    chosen[static_cast<size_t>(comm.rank())] = scheme.decision(inputs[0].name())->chosen;
  });
  EXPECT_EQ(chosen, (std::vector<std::string>{"sparse_ps", "sparse_ps"}));

  ::setenv("ZEN_SCHEME", "sparcml", 1);
  auto forced = AllSchemes().Create("auto");
  ::unsetenv("ZEN_SCHEME");
  testing::RunRanks(Backend::kInProc, 1,
                    [&](Communicator& comm) { forced->Sync(comm, inputs[0]); });
  EXPECT_EQ(static_cast<AutoScheme&>(*forced).decision(inputs[0].name())->chosen, "sparcml");

  ::setenv("ZEN_SCHEME", "nope", 1);
  EXPECT_THROW(AllSchemes().Create("auto"), InvalidArgument);
  ::unsetenv("ZEN_SCHEME");

  ::testing::internal::CaptureStderr();
  ::setenv("ZEN_LOG", "info", 1);
  testing::RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
    AutoScheme scheme(BuiltinSchemes(), AutoOptions{});
    scheme.Sync(comm, inputs[static_cast<size_t>(comm.rank())]);
  });
  ::unsetenv("ZEN_LOG");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("zen auto: tensor"), std::string::npos) << log;
  EXPECT_NE(log.find("sparcml"), std::string::npos) << log;
  EXPECT_NE(log.find("dense"), std::string::npos) << log;
}

TEST(AutoSchemeTest, AllSchemesHoldsBuiltinsAndAuto) {
  const SchemeRegistry all = AllSchemes();
  ASSERT_NE(all.Find("auto"), nullptr);
  for (const std::string& id : BuiltinSchemes().ids()) EXPECT_NE(all.Find(id), nullptr) << id;
  EXPECT_EQ(all.ids().size(), BuiltinSchemes().ids().size() + 1);
}

}  // namespace
}  // namespace zen
