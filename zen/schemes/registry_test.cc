// The algorithm table: every builtin entry carries its own cost function,
// predictions come from the entries (no names in the model), and Select
// honours candidates, ties and refusals.
#include "zen/schemes/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "zen/core/error.h"
#include "zen/testing/ranks.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

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

// Create with rank_order builds an entry with rank_order by its factory and
// one with a rank_order_factory by that factory (with the options'
// check_agreement applied); an entry with neither is InvalidArgument naming
// it. SumsInRankOrder says which.
TEST(SchemeRegistryTest, CreateInRankOrderUsesTheEntrysRankOrderFactory) {
  SchemeRegistry reg;
  const auto made = [](const char* which) {
    return [which](const SchemeOptions&) { return BuiltinSchemes().Create(which); };
  };
  SchemeInfo ordered{"ordered", "sums in rank order", made("zen")};
  ordered.rank_order = true;
  SchemeInfo chooser{"chooser", "routes", made("sparcml")};
  chooser.selector = true;
  chooser.rank_order_factory = made("agsparse");
  SchemeInfo neither{"neither", "sums in no fixed order", made("sparcml")};
  for (SchemeInfo* info : {&ordered, &chooser, &neither}) reg.Add(*info);
  EXPECT_TRUE(SchemeRegistry::SumsInRankOrder(*reg.Find("ordered")));
  EXPECT_TRUE(SchemeRegistry::SumsInRankOrder(*reg.Find("chooser")));
  EXPECT_FALSE(SchemeRegistry::SumsInRankOrder(*reg.Find("neither")));
  SchemeOptions off;
  off.check_agreement = false;
  EXPECT_EQ(reg.Create("ordered", off, /*rank_order=*/true)->name(), "zen");
  EXPECT_EQ(reg.Create("chooser", {}, /*rank_order=*/false)->name(), "sparcml");
  const std::unique_ptr<Scheme> ranked = reg.Create("chooser", off, /*rank_order=*/true);
  EXPECT_EQ(ranked->name(), "agsparse");
  EXPECT_FALSE(ranked->check_agreement());
  EXPECT_EQ(reg.Create("neither")->name(), "sparcml");
  try {
    reg.Create("neither", {}, /*rank_order=*/true);
    ADD_FAILURE() << "an entry without rank order was built for it";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("scheme 'neither' does not sum in rank order"),
              std::string::npos)
        << e.what();
  }
}

// SchemeOptions::check_agreement reaches every scheme Create builds: with it
// off, a call sends exactly the metadata records fewer (56 bytes to each
// peer) and the same sum, the dense reference's.
TEST(SchemeRegistryTest, CreateAppliesCheckAgreement) {
  const SchemeRegistry registry = BuiltinSchemes();
  constexpr int kWorld = 3;
  SyntheticSpec spec;
  spec.rows = 500;
  spec.width = 4;
  spec.density = 0.05;
  const std::vector<SparseTensor> in = GenerateSynthetic(spec, kWorld);
  const DenseReference reference(in);
  for (const std::string& id : registry.ids()) {
    SCOPED_TRACE(id);
    SchemeOptions off;
    off.check_agreement = false;
    EXPECT_TRUE(registry.Create(id)->check_agreement());
    EXPECT_FALSE(registry.Create(id, off)->check_agreement());
    std::vector<uint64_t> sent[2];
    std::vector<SparseTensor> sums[2];
    for (int k = 0; k < 2; ++k) {
      sent[k].assign(kWorld, 0);
      sums[k].resize(kWorld);
      testing::RunRanks(testing::Backend::kInProc, kWorld, [&](Communicator& comm) {
        auto scheme = k == 0 ? registry.Create(id) : registry.Create(id, off);
        const size_t r = static_cast<size_t>(comm.rank());
        scheme->Sync(comm, in[r]);  // the first call may agree on a seed
        const uint64_t before = comm.counters().total_sent();
        sums[k][r] = scheme->Sync(comm, in[r]);
        sent[k][r] = comm.counters().total_sent() - before;
      });
    }
    for (size_t r = 0; r < kWorld; ++r) {
      EXPECT_EQ(sent[0][r], sent[1][r] + 56 * (kWorld - 1)) << "rank " << r;
      for (int k = 0; k < 2; ++k) {
        const Agreement a = reference.Compare(sums[k][r]);
        EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << r << ", check_agreement " << (k == 0);
        EXPECT_EQ(a.rows_mismatch, 0) << "rank " << r << ", check_agreement " << (k == 0);
      }
      EXPECT_TRUE(std::equal(sums[0][r].ids().begin(), sums[0][r].ids().end(),
                             sums[1][r].ids().begin(), sums[1][r].ids().end()));
      EXPECT_TRUE(std::equal(sums[0][r].values().begin(), sums[0][r].values().end(),
                             sums[1][r].values().begin(), sums[1][r].values().end()));
    }
  }
}

// Each entry declares its per-call capabilities once: the registry's
// SchemeInfo::capabilities and a built object's capabilities() agree, and
// zen (the one scheme with half-width values and sum orders) declares both.
TEST(SchemeRegistry, EntriesAndObjectsDeclareTheSameCapabilities) {
  const SchemeRegistry registry = BuiltinSchemes();
  for (const SchemeInfo& info : registry.schemes()) {
    EXPECT_EQ(info.capabilities, registry.Create(info.id)->capabilities()) << info.id;
  }
  ASSERT_NE(registry.Find("zen"), nullptr);
  EXPECT_TRUE(registry.Find("zen")->capabilities.narrow_values);
  EXPECT_TRUE(registry.Find("zen")->capabilities.sum_order);
  EXPECT_FALSE(registry.Find("agsparse")->capabilities.narrow_values);
  EXPECT_FALSE(registry.Find("agsparse")->capabilities.sum_order);
}

// A call's options that the scheme does not declare, or that are
// malformed, are InvalidArgument on every rank, naming the scheme and what
// is missing, before any data moves; the communicator stays usable.
TEST(SchemeRegistry, PerCallOptionsAreCheckedOnEveryRank) {
  constexpr int kWorld = 3;
  SyntheticSpec spec;
  spec.rows = 200;
  spec.width = 2;
  spec.density = 0.1;
  const std::vector<SparseTensor> in = GenerateSynthetic(spec, kWorld);
  const DenseReference reference(in);
  const std::vector<SumStep> order = {{0, 1}, {10, 2}};
  const std::vector<SumStep> bad_order = {{0, 1}, {10, kWorld}};
  struct Case {
    std::string scheme;
    SyncOptions options;
    bool dense;
    std::string expect;
  };
  const auto values = [](WireValues v) { return SyncOptions{v, {}}; };
  const auto ordered = [](std::span<const SumStep> o) {
    return SyncOptions{WireValues::kFloat32, o};
  };
  const std::vector<Case> cases = {
      {"agsparse", values(WireValues::kBfloat16), false,
       "scheme 'agsparse' does not take bfloat16 values on the wire"},
      {"sparcml", ordered(order), true, "scheme 'sparcml' does not take a sum order"},
      {"zen", ordered(order), false, "a sum order on a sparse call"},
      {"zen", values(static_cast<WireValues>(7)), false, "wire values 7 is not one of"},
      {"zen", ordered(bad_order), true, "sum order step 1 (10, 3) is invalid"},
  };
  const SchemeRegistry registry = BuiltinSchemes();
  for (const Case& c : cases) {
    std::mutex mu;
    testing::RunRanks(testing::Backend::kInProc, kWorld, [&](Communicator& comm) {
      const size_t r = static_cast<size_t>(comm.rank());
      auto scheme = registry.Create(c.scheme);
      std::vector<float> dense = in[r].ToDense();
      std::string what;
      try {
        if (c.dense) {
          scheme->SyncDense(comm, dense, spec.rows, spec.width, "t", c.options);
        } else {
          scheme->Sync(comm, in[r], c.options);
        }
      } catch (const InvalidArgument& e) {
        what = e.what();
      }
      const SparseTensor sum = scheme->Sync(comm, in[r]);  // still usable
      std::lock_guard lock(mu);
      EXPECT_NE(what.find(c.expect), std::string::npos)
          << c.scheme << " rank " << r << ": '" << what << "'";
      EXPECT_EQ(reference.Compare(sum).rows_mismatch, 0) << c.scheme << " rank " << r;
    });
  }
}

}  // namespace
}  // namespace zen
