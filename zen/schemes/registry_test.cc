// The algorithm table: every builtin entry carries its own cost function,
// predictions come from the entries (no names in the model), and Select
// honours candidates, ties and refusals.
#include "zen/schemes/registry.h"

#include <gtest/gtest.h>

#include "zen/core/error.h"

namespace zen {
namespace {

WorkloadProfile Profile(int n) {
  WorkloadProfile p;
  p.sparsity.world_size = n;
  p.sparsity.rows = 10000;
  p.sparsity.width = 4;
  p.sparsity.density = 0.01;
  for (int k = 1; k <= n; ++k) p.sparsity.gamma.push_back(k);
  return p;
}

// A fake entry whose volume is `bytes` received and sent by every rank.
SchemeInfo Fake(std::string id, double bytes, bool ok = true) {
  SchemeInfo info{std::move(id), "fake", [](const SchemeOptions&) -> std::unique_ptr<Scheme> {
                    return BuiltinSchemes().Create("agsparse");
                  }};
  info.cost = [bytes](const CostInputs& in) {
    CostVolumes v = NewVolumes(in);
    for (double& r : v.recv) r += bytes;
    for (double& s : v.sent) s += bytes;
    return v;
  };
  if (!ok) info.supports = [](const SparsityProfile&) { return Support::No("fake refusal"); };
  return info;
}

TEST(SchemeRegistryTest, EveryBuiltinSchemeCarriesItsCost) {
  const SchemeRegistry reg = BuiltinSchemes();
  EXPECT_EQ(reg.modeled(), reg.ids());
  const WorkloadProfile p = Profile(4);
  for (const SchemeInfo& s : reg.schemes()) {
    ASSERT_TRUE(s.cost) << s.id;
    const auto x = reg.Predict(s.id, p, Network{});
    ASSERT_TRUE(x.has_value()) << s.id;
    EXPECT_EQ(x->scheme, s.id);
    // Every scheme receives at least the metadata of its 3 peers.
    EXPECT_GE(x->recv_max, 3 * kAgreementBytes) << s.id;
    EXPECT_GT(x->time_s, 0) << s.id;
  }
  EXPECT_FALSE(reg.Predict("nope", p, Network{}).has_value());
  EXPECT_EQ(reg.PredictAll(p, Network{}).size(), reg.ids().size());
}

TEST(SchemeRegistryTest, PredictionIsTheEntrysVolumes) {
  SchemeRegistry reg;
  reg.Add(Fake("a", 1000));
  const WorkloadProfile p = Profile(3);
  const Network net{.bandwidth_bytes_per_s = 1000, .latency_s = 0.5};
  const Prediction x = *reg.Predict("a", p, net);
  EXPECT_DOUBLE_EQ(x.recv_max, 1000 + 2 * kAgreementBytes);
  EXPECT_DOUBLE_EQ(x.recv_mean, 1000 + 2 * kAgreementBytes);
  EXPECT_EQ(x.rounds, 1);  // the metadata exchange
  EXPECT_DOUBLE_EQ(x.time_s, 0.5 + (1000 + 2 * kAgreementBytes) / 1000);
}

TEST(SchemeRegistryTest, SelectHonoursCandidatesTiesAndRefusals) {
  SchemeRegistry reg;
  reg.Add(Fake("slow", 5000));
  reg.Add(Fake("tie1", 1000));
  reg.Add(Fake("tie2", 1000));
  reg.Add(Fake("fastest_refuses", 10, /*ok=*/false));
  reg.Add({"unmodeled", "no cost", [](const SchemeOptions&) -> std::unique_ptr<Scheme> {
             return nullptr;
           }});
  const WorkloadProfile p = Profile(4);
  Selection s = reg.Select(p, Network{});
  EXPECT_EQ(s.chosen, "tie1");  // the earlier entry of equal time
  ASSERT_EQ(s.refused.size(), 1u);
  EXPECT_EQ(s.refused[0].scheme, "fastest_refuses");
  EXPECT_EQ(s.refused[0].reason, "fake refusal");
  EXPECT_EQ(s.predictions.size(), 4u);  // unmodeled is not predicted

  const std::vector<std::string> only{"slow", "unmodeled", "nope"};
  s = reg.Select(p, Network{}, only);
  EXPECT_EQ(s.chosen, "slow");
  EXPECT_TRUE(s.refused.empty());
  EXPECT_EQ(s.predictions.size(), 1u);

  // An asker can overrule the entries (auto asks the instance it would run).
  s = reg.Select(p, Network{}, {}, [](const SchemeInfo& info, const SparsityProfile&) {
    return info.id == "slow" ? Support::Yes() : Support::No("asked: no");
  });
  EXPECT_EQ(s.chosen, "slow");
  EXPECT_EQ(s.refused.size(), 3u);  // fastest_refuses, tie1, tie2, fastest first
  EXPECT_EQ(s.refused[0].scheme, "fastest_refuses");
  EXPECT_EQ(s.refused[1].scheme, "tie1");

  const std::vector<std::string> refusing{"fastest_refuses"};
  s = reg.Select(p, Network{}, refusing);
  EXPECT_EQ(s.chosen, "");
  EXPECT_EQ(s.refused.size(), 1u);
}

TEST(SchemeRegistryTest, EntriesNeedAFactoryAndUniqueIds) {
  SchemeRegistry reg;
  reg.Add(Fake("a", 1));
  EXPECT_THROW(reg.Add(Fake("a", 2)), InvalidArgument);
  EXPECT_THROW(reg.Add(SchemeInfo{"b", "no factory", nullptr}), InvalidArgument);
}

}  // namespace
}  // namespace zen
