// Every option of every scheme factory is checked where it is given: a bad
// value is zen::InvalidArgument naming the option and the value, from
// SchemeRegistry::Create and from the entry's factory called directly, never
// a crash of the first call (issue 41, C1: auto with block_values 0 died of
// SIGFPE in the profiler's block arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "zen/analysis/auto_scheme.h"
#include "zen/core/error.h"
#include "zen/core/topk.h"
#include "zen/core/worker_pool.h"
#include "zen/schemes/registry.h"
#include "zen/schemes/zen/partitioner.h"
#include "zen/schemes/zen/zen.h"
#include "zen/testing/ranks.h"

namespace zen {
namespace {

struct BadOption {
  std::string option;  // the name the message must carry
  std::string value;   // the value, as the message prints it
  SchemeOptions options;
};

std::vector<BadOption> BadSchemeOptions() {
  std::vector<BadOption> out;
  for (int64_t b : {int64_t{0}, int64_t{-1}, INT64_MIN, (int64_t{1} << 30) + 1, INT64_MAX}) {
    SchemeOptions o;
    o.block_values = b;
    out.push_back({"block_values", std::to_string(b), o});
  }
  for (int t : {-1, INT32_MIN, kMaxThreads + 1, 100000, INT32_MAX}) {
    SchemeOptions o;
    o.threads = t;
    out.push_back({"threads", std::to_string(t), o});
  }
  return out;
}

// The message names the scheme, the option and the value.
void ExpectNamed(const std::string& what, const std::string& scheme, const BadOption& bad) {
  EXPECT_NE(what.find(scheme), std::string::npos) << what;
  EXPECT_NE(what.find(bad.option + " " + bad.value), std::string::npos) << what;
}

TEST(SchemeOptions, EveryFactoryRefusesEveryBadSchemeOption) {
  const SchemeRegistry registry = AllSchemes();
  ASSERT_GE(registry.schemes().size(), 7u);
  for (const SchemeInfo& info : registry.schemes()) {
    for (const BadOption& bad : BadSchemeOptions()) {
      SCOPED_TRACE(info.id + " " + bad.option + " " + bad.value);
      try {
        registry.Create(info.id, bad.options);
        ADD_FAILURE() << "Create accepted it";
      } catch (const InvalidArgument& e) {
        ExpectNamed(e.what(), info.id, bad);
      }
      try {
        info.factory(bad.options);
        ADD_FAILURE() << "the factory accepted it";
      } catch (const InvalidArgument& e) {
        ExpectNamed(e.what(), info.id, bad);
      }
    }
  }
}

// The case: auto with block_values 0 syncing a tensor at world size
// 1 and 2 raises InvalidArgument when built; the valid bounds still work.
TEST(SchemeOptions, AutoBlockValuesZeroIsRefusedNotSigfpe) {
  SchemeOptions zero;
  zero.block_values = 0;
  EXPECT_THROW(AllSchemes().Create("auto", zero), InvalidArgument);
  for (int64_t b : {int64_t{1}, int64_t{1} << 30}) {
    SchemeOptions ok;
    ok.block_values = b;
    testing::RunRanks(testing::Backend::kInProc, 2, [&](Communicator& comm) {
      auto s = AllSchemes().Create("auto", ok);
      const SparseTensor local =
          SparseTensor::FromCoo(1000, 3, {1, 999}, std::vector<float>(6, 1.0f), Duplicates::kReject, "t");
      const SparseTensor sum = s->Sync(comm, local);
      ASSERT_EQ(sum.nnz(), 2u);
      for (float v : sum.values()) EXPECT_EQ(v, 2.0f);  // two ranks' 1 + 1
    });
  }
}

TEST(SchemeOptions, AutoRefusesEveryBadAutoOption) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::string text;  // what the message must contain
    std::function<void(AutoOptions&)> set;
  };
  const std::vector<Case> cases = {
      {"warmup_calls 0", [](AutoOptions& o) { o.profiler.schedule.warmup_calls = 0; }},
      {"warmup_calls -5", [](AutoOptions& o) { o.profiler.schedule.warmup_calls = -5; }},
      {"sample_ids 0", [](AutoOptions& o) { o.profiler.sample_ids = 0; }},
      {"sample_ids -1", [](AutoOptions& o) { o.profiler.sample_ids = -1; }},
      {"bandwidth_bytes_per_s 0", [](AutoOptions& o) { o.network.bandwidth_bytes_per_s = 0; }},
      {"bandwidth_bytes_per_s nan", [=](AutoOptions& o) { o.network.bandwidth_bytes_per_s = nan; }},
      {"bandwidth_bytes_per_s inf", [=](AutoOptions& o) { o.network.bandwidth_bytes_per_s = inf; }},
      {"latency_s -1", [](AutoOptions& o) { o.network.latency_s = -1; }},
      {"latency_s nan", [=](AutoOptions& o) { o.network.latency_s = nan; }},
      {"trial.candidates -1", [](AutoOptions& o) { o.trial.candidates = -1; }},
      {"trial.within 0.5", [](AutoOptions& o) { o.trial.within = 0.5; }},
      {"trial.within nan", [=](AutoOptions& o) { o.trial.within = nan; }},
      {"trial.calls_each 0", [](AutoOptions& o) { o.trial.calls_each = 0; }},
      {"trial.drop 0", [](AutoOptions& o) { o.trial.drop = 0; }},
      {"trial.drop inf", [=](AutoOptions& o) { o.trial.drop = inf; }},
      {"max_tensors 0", [](AutoOptions& o) { o.max_tensors = 0; }},
      {"candidate 'nosuch'", [](AutoOptions& o) { o.candidates = {"zen", "nosuch"}; }},
      {"block_values 0", [](AutoOptions& o) { o.scheme.block_values = 0; }},
      {"threads -2", [](AutoOptions& o) { o.scheme.threads = -2; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    AutoOptions o;
    c.set(o);
    try {
      AutoScheme s(BuiltinSchemes(), o);
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(c.text), std::string::npos) << e.what();
    }
    // Through the registry entry, whose defaults are these options (Create's
    // own SchemeOptions replace o.scheme: those are the first test's).
    if (c.text.rfind("block_values", 0) != 0 && c.text.rfind("threads", 0) != 0) {
      EXPECT_THROW(AllSchemes(o).Create("auto"), InvalidArgument);
    }
  }
  // The documented limits are accepted.
  AutoOptions edge;
  edge.profiler.schedule = {1, 0};
  edge.profiler.sample_ids = 1;
  edge.network = {1e-3, 0};
  edge.trial = {0, 1.0, 1, 1.0};
  edge.max_tensors = 1;
  edge.candidates = {"zen"};
  EXPECT_NO_THROW(AutoScheme(BuiltinSchemes(), edge));
}

TEST(SchemeOptions, ZenConfigAndThreadsOfCoreObjects) {
  ZenConfig bad;
  bad.ownership = static_cast<ZenOwnership>(5);
  EXPECT_THROW(ZenScheme({}, bad), InvalidArgument);
  ZenConfig enc;
  enc.pull_encoding = static_cast<EncodingChoice>(40);
  EXPECT_THROW(ZenScheme({}, enc), InvalidArgument);
  ZenConfig part;
  part.dense_partitioner = "nosuch";
  EXPECT_THROW(ZenScheme({}, part), InvalidArgument);
  for (int t : {-1, kMaxThreads + 1, 100000}) {
    SCOPED_TRACE(t);
    try {
      TopKSelector sel(t);
      ADD_FAILURE() << "TopKSelector accepted threads " << t;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("threads " + std::to_string(t)), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(MakePartitioner("counting", t), InvalidArgument);
    EXPECT_THROW(MakePartitioner("hierarchical", t), InvalidArgument);
  }
  EXPECT_NO_THROW(TopKSelector sel(kMaxThreads));  // threads start at the first parallel call
}

}  // namespace
}  // namespace zen
