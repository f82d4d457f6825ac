#include "zen/engine/context.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/testing/ranks.h"
#include "zen/testing/reference.h"
#include "zen/analysis/auto_scheme.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

constexpr int kWorld = 3;
constexpr auto kTimeout = std::chrono::seconds(20);

ContextOptions Opt(const std::string& scheme) {
  ContextOptions o;
  o.scheme = scheme;
  return o;
}

std::vector<SparseTensor> Inputs(int64_t rows, int64_t width, double density, uint64_t seed,
                                 const std::string& name) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.width = width;
  spec.density = density;
  spec.skew = 1.1;
  spec.seed = seed;
  std::vector<SparseTensor> in = GenerateSynthetic(spec, kWorld);
  for (auto& t : in) t.set_name(name);
  return in;
}

// Whether the engine coalesces a batch's tensors of this scheme (schemes
// that add in rank order, and selectors: auto).
bool Coalesces(const std::string& scheme) {
  const SchemeInfo* info = AllSchemes().Find(scheme);
  return info->rank_order || info->selector;
}

// Each element of the ranks' dense buffers summed in a sum order
// (SyncOptions::sum_order) written out: from its step's start rank
// cyclically downward.
std::vector<float> SumInOrder(const std::vector<std::vector<float>>& in,
                              std::span<const SumStep> order) {
  const int world = static_cast<int>(in.size());
  std::vector<float> want(in[0].size());
  for (size_t e = 0; e < want.size(); ++e) {
    int start = 0;
    for (const auto& [first, s] : order) {
      if (static_cast<int64_t>(e) >= first) start = s;
    }
    float acc = in[static_cast<size_t>(start)][e];
    for (int k = 1; k < world; ++k) acc = in[static_cast<size_t>((start - k + world) % world)][e] + acc;
    want[e] = acc;
  }
  return want;
}

// The ranks' sparse inputs added in ascending rank order, densely.
std::vector<float> SumInRankOrder(const std::vector<SparseTensor>& in) {
  std::vector<float> want = in[0].ToDense();
  for (size_t r = 1; r < in.size(); ++r) {
    const std::vector<float> x = in[r].ToDense();
    for (size_t e = 0; e < want.size(); ++e) want[e] = want[e] + x[e];
  }
  return want;
}

// Messages sent by a batch whose tensors form two exchanges (`all`) against a
// batch of one tensor (`one`): two exchanges and one metadata round where
// the scheme coalesces, more otherwise. auto's profiling rounds depend on
// its schedule: not checked.
void ExpectTwoExchanges(uint64_t all, uint64_t one, const std::string& scheme, size_t rank) {
  if (scheme == "auto") return;
  if (Coalesces(scheme)) {
    EXPECT_EQ(all, 2 * one - (kWorld - 1)) << "rank " << rank;
  } else {
    EXPECT_GT(all, 2 * one) << "rank " << rank;
  }
}

// Messages sent by a batch of `tensors` tensors and by one of a single
// tensor, each measured after a warm-up batch of its own size (zen agrees on
// its seed on first use; auto profiles); run(k) synchronizes a batch of the
// first k tensors and returns the messages it sent. Ends with a batch of
// all of them, whose sums the caller checks.
template <typename Run>
std::pair<uint64_t, uint64_t> AllAndOne(Run&& run, size_t tensors) {
  run(tensors);
  run(1);
  const uint64_t all = run(tensors);
  const uint64_t one = run(1);
  run(tensors);
  return {all, one};
}

// The result agrees with the dense reference: every row present, each value
// within 1e-5 relative.
void ExpectAgrees(const Agreement& a, const std::string& what) {
  EXPECT_LE(a.max_rel_error, 1e-5) << what;
  EXPECT_EQ(a.rows_mismatch, 0) << what;
}

void ExpectSameBits(std::span<const float> got, std::span<const float> want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << " element " << i;
  }
}

// A DDP-like bucket: an embedding-shaped dense gradient, a bias, a fully
// dense matrix and a sparse embedding gradient, each with its reference.
struct Bucket {
  std::vector<std::vector<SparseTensor>> inputs;  // per tensor, per rank
  std::vector<std::string> names = {"emb.dense", "fc.bias", "fc.weight", "emb.sparse"};
  Bucket() {
    inputs.push_back(Inputs(500, 8, 0.05, 1, names[0]));
    inputs.push_back(Inputs(37, 1, 1.0, 2, names[1]));
    inputs.push_back(Inputs(16, 24, 1.0, 3, names[2]));
    inputs.push_back(Inputs(2000, 4, 0.02, 4, names[3]));
  }
};

class ContextTest : public ::testing::TestWithParam<std::string> {
 protected:
  // After a failed batch: the bias alone, synchronized again on the same
  // context, equals the reference (the context is still usable).
  void ExpectBiasBatchWorks(Context& ctx, const Bucket& b, size_t rank) {
    std::vector<float> good = b.inputs[1][rank].ToDense();
    std::vector<BatchTensor> ok = {BatchTensor::Dense(b.names[1], good, 37, 1)};
    ctx.Sync("bucket", ok);
    const Agreement agree = DenseReference(b.inputs[1]).CompareDense(good);
    std::lock_guard lock(mu_);
    EXPECT_EQ(agree.rows_mismatch, 0);
    EXPECT_LE(agree.max_rel_error, 1e-5);
  }

  // body(comm, rank) on every rank of kWorld over Gloo TCP, one thread each.
  static void OnEveryRank(const std::function<void(Communicator&, size_t)>& body) {
    testing::RunRanks(
        Backend::kGlooTcp, kWorld,
        [&](Communicator& comm) { body(comm, static_cast<size_t>(comm.rank())); }, kTimeout);
  }

  std::mutex mu_;
};

// Every tensor of a mixed batch equals the independent dense reference, on
// every rank, for several batches in flight at once.
TEST_P(ContextTest, MixedBatchesMatchTheReference) {
  const Bucket b;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        constexpr int kBatches = 3;
        std::vector<std::vector<std::vector<float>>> dense(kBatches);
        std::vector<SparseTensor> sums(kBatches);
        std::vector<std::vector<BatchTensor>> batches(kBatches);
        std::vector<Handle> handles;
        for (int k = 0; k < kBatches; ++k) {
          for (size_t t = 0; t < 3; ++t) dense[k].push_back(b.inputs[t][r].ToDense());
          for (size_t t = 0; t < 3; ++t) {
            const SparseTensor& in = b.inputs[t][r];
            batches[k].push_back(
                BatchTensor::Dense(b.names[t], dense[k][t], in.rows(), in.width()));
          }
          batches[k].push_back(BatchTensor::Sparse(b.names[3], b.inputs[3][r], &sums[k]));
          handles.push_back(ctx.Start("bucket" + std::to_string(k), batches[k]));
        }
        for (const Handle& h : handles) h.Wait();
        for (int k = 0; k < kBatches; ++k) {
          EXPECT_TRUE(handles[static_cast<size_t>(k)].Test());
          for (size_t t = 0; t < 3; ++t) {
            const Agreement a = DenseReference(b.inputs[t]).CompareDense(dense[k][t]);
            std::lock_guard lock(mu_);
            ExpectAgrees(a, b.names[t] + " rank " + std::to_string(r));
          }
          const Agreement a = DenseReference(b.inputs[3]).Compare(sums[k]);
          std::lock_guard lock(mu_);
          ExpectAgrees(a, "sparse, rank " + std::to_string(r));
        }
      },
      kTimeout);
}

// A sparse tensor written into a caller's dense buffer (SparseInto, the
// top-k hook's entry) beside a dense and a plain sparse one: the buffer
// holds the sum divided by the divisor, zeros elsewhere; a wrong-sized
// buffer on one rank fails the batch on every rank, and the next batch runs.
TEST_P(ContextTest, SparseIntoWritesTheDividedSumAndBadOutputFailsEveryRank) {
  const Bucket b;
  std::vector<std::string> what(kWorld);
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<float> bias = b.inputs[1][r].ToDense();
        SparseTensor emb_sum;
        std::vector<float> into(2000 * 4, 9.0f);
        std::vector<BatchTensor> batch = {
            BatchTensor::Dense(b.names[1], bias, 37, 1),
            BatchTensor::SparseInto(b.names[3], b.inputs[3][r], into, 4.0f),
            BatchTensor::Sparse(b.names[0], b.inputs[0][r], &emb_sum)};
        ctx.Sync("bucket", batch);
        // Divided by 4, a power of two: times 4 is exactly the sum again.
        std::vector<float> times4(into.size());
        for (size_t i = 0; i < into.size(); ++i) times4[i] = into[i] * 4.0f;
        {
          const Agreement a = DenseReference(b.inputs[3]).CompareDense(times4);
          const Agreement c = DenseReference(b.inputs[1]).CompareDense(bias);
          const Agreement e = DenseReference(b.inputs[0]).Compare(emb_sum);
          std::lock_guard lock(mu_);
          EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << r;
          EXPECT_EQ(a.rows_mismatch, 0) << "rank " << r;
          EXPECT_EQ(c.rows_mismatch, 0) << "rank " << r;
          EXPECT_EQ(e.rows_mismatch, 0) << "rank " << r;
        }
        std::vector<float> short_out(into.size() - 1);
        if (comm.rank() == 1) batch[1].sparse_into = short_out;
        try {
          ctx.Sync("bucket", batch);
        } catch (const InvalidArgument& e) {
          std::lock_guard lock(mu_);
          what[r] = e.what();
        }
        batch[1].sparse_into = into;
        ctx.Sync("bucket", batch);
        for (size_t i = 0; i < into.size(); ++i) times4[i] = into[i] * 4.0f;
        const Agreement a = DenseReference(b.inputs[3]).CompareDense(times4);
        std::lock_guard lock(mu_);
        EXPECT_EQ(a.rows_mismatch, 0) << "rank " << r;
        EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << r;
      },
      kTimeout);
  EXPECT_NE(what[1].find("dense output has"), std::string::npos) << what[1];
  EXPECT_NE(what[0].find("rank 1"), std::string::npos) << what[0];
  EXPECT_NE(what[2].find("rank 1"), std::string::npos) << what[2];
}

// A batch is one metadata round: a batch of 4 tensors sends 3 x (n-1) x 56
// bytes less than the same 4 tensors synchronized one Sync at a time.
TEST_P(ContextTest, OneMetadataRoundPerBatch) {
  if (GetParam() == "auto") GTEST_SKIP() << "auto's profiling rounds depend on its schedule";
  const Bucket b;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        auto measure = [&](bool batched) {
          std::vector<std::vector<float>> dense;
          for (size_t t = 0; t < 3; ++t) dense.push_back(b.inputs[t][r].ToDense());
          SparseTensor sum;
          const uint64_t before = comm.counters().total_sent();
          if (batched) {
            Context ctx(comm, Opt(GetParam()));
            std::vector<BatchTensor> batch;
            for (size_t t = 0; t < 3; ++t) {
              batch.push_back(BatchTensor::Dense(b.names[t], dense[t], b.inputs[t][r].rows(),
                                                 b.inputs[t][r].width()));
            }
            batch.push_back(BatchTensor::Sparse(b.names[3], b.inputs[3][r], &sum));
            ctx.Sync("bucket", batch);
          } else {
            auto scheme = AllSchemes().Create(GetParam());
            for (size_t t = 0; t < 3; ++t) {
              scheme->SyncDense(comm, dense[t], b.inputs[t][r].rows(), b.inputs[t][r].width(),
                                b.names[t]);
            }
            sum = scheme->Sync(comm, b.inputs[3][r]);
          }
          return comm.counters().total_sent() - before;
        };
        // Warm once (zen agrees on its seed on first use), then compare.
        measure(true);
        measure(false);
        const uint64_t batched = measure(true);
        const uint64_t single = measure(false);
        std::lock_guard lock(mu_);
        EXPECT_EQ(single - batched, 3u * (kWorld - 1) * 56u) << "rank " << r;
      },
      kTimeout);
}

// Sparse tensors of one width (a plain one, a one-row one, one with no rows
// on any rank, one written into a dense buffer) move in one exchange for
// the schemes that sum in rank order: the batch sends as many messages as
// a batch of one of them; a tensor of another width moves apart. Each
// result is, bit for bit, what a call of its own gives, and matches the
// independent reference. Other schemes move one tensor at a time.
TEST_P(ContextTest, SparseTensorsOfOneWidthMoveInOneExchange) {
  const std::vector<std::string> names = {"emb.a", "emb.one", "emb.none", "emb.b", "emb.into"};
  std::vector<std::vector<SparseTensor>> in;
  in.push_back(Inputs(700, 4, 0.05, 11, names[0]));
  in.push_back(Inputs(1, 4, 1.0, 12, names[1]));
  in.push_back(std::vector<SparseTensor>(kWorld, SparseTensor::Empty(300, 4, names[2])));
  in.push_back(Inputs(500, 2, 0.05, 13, names[3]));  // another width: its own group of one
  in.push_back(Inputs(400, 4, 0.1, 14, names[4]));
  constexpr float kDivisor = 3.0f;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<SparseTensor> sums(4);
        std::vector<float> into(400 * 4, -1.0f);
        auto run = [&](size_t tensors) {
          std::vector<BatchTensor> batch;
          for (size_t t = 0; t < std::min<size_t>(tensors, 4); ++t) {
            batch.push_back(BatchTensor::Sparse(names[t], in[t][r], &sums[t]));
          }
          if (tensors == 5) batch.push_back(BatchTensor::SparseInto(names[4], in[4][r], into, kDivisor));
          const uint64_t before = comm.counters().messages_sent();
          ctx.Sync("sparse" + std::to_string(tensors), batch);
          return comm.counters().messages_sent() - before;
        };
        const auto [all, one] = AllAndOne(run, 5);
        // Each tensor on its own, through a scheme's own Sync.
        auto own = AllSchemes().Create(GetParam());
        for (size_t t = 0; t < 5; ++t) {
          const SparseTensor alone = own->Sync(comm, in[t][r]);
          const Agreement a = DenseReference(in[t]).Compare(t < 4 ? sums[t] : alone);
          std::lock_guard lock(mu_);
          ExpectAgrees(a, names[t] + " rank " + std::to_string(r));
          if (GetParam() == "auto") continue;  // may choose another scheme for the whole
          if (t < 4) {
            EXPECT_EQ(sums[t], alone) << names[t] << " rank " << r;
            EXPECT_EQ(sums[t].name(), names[t]);
          } else {
            std::vector<float> expected(into.size());
            WriteInto(alone, expected, kDivisor);
            ExpectSameBits(into, expected, names[t] + " rank " + std::to_string(r));
          }
        }
        std::lock_guard lock(mu_);
        // Tensors 0, 1, 2 and 4 in one exchange, tensor 3 in another.
        ExpectTwoExchanges(all, one, GetParam(), r);
      },
      kTimeout);
}

// Dense tensors of one scheme and width also move in one exchange: each sum
// is bit for bit its own SyncDense's, and the reference's; a tensor of
// another width moves alone.
TEST_P(ContextTest, DenseTensorsOfOneWidthMoveInOneExchange) {
  const std::vector<std::string> names = {"norm.a", "bias.b", "zero.c", "w.d"};
  std::vector<std::vector<SparseTensor>> in;
  in.push_back(Inputs(64, 1, 1.0, 31, names[0]));
  in.push_back(Inputs(37, 1, 1.0, 32, names[1]));
  in.push_back(std::vector<SparseTensor>(kWorld, SparseTensor::Empty(20, 1, names[2])));
  in.push_back(Inputs(16, 24, 0.5, 33, names[3]));  // another width: its own exchange
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<std::vector<float>> dense(names.size());
        auto run = [&](size_t tensors) {
          std::vector<BatchTensor> batch;
          for (size_t t = 0; t < tensors; ++t) {
            dense[t] = in[t][r].ToDense();
            batch.push_back(
                BatchTensor::Dense(names[t], dense[t], in[t][r].rows(), in[t][r].width()));
          }
          const uint64_t before = comm.counters().messages_sent();
          ctx.Sync("dense" + std::to_string(tensors), batch);
          return comm.counters().messages_sent() - before;
        };
        const auto [all, one] = AllAndOne(run, names.size());
        auto own = AllSchemes().Create(GetParam());
        for (size_t t = 0; t < names.size(); ++t) {
          std::vector<float> alone = in[t][r].ToDense();
          own->SyncDense(comm, alone, in[t][r].rows(), in[t][r].width(), names[t]);
          const Agreement a = DenseReference(in[t]).CompareDense(dense[t]);
          std::lock_guard lock(mu_);
          ExpectAgrees(a, names[t] + " rank " + std::to_string(r));
          if (GetParam() == "auto") continue;  // may choose another scheme for the whole
          ExpectSameBits(dense[t], alone, names[t] + " rank " + std::to_string(r));
        }
        std::lock_guard lock(mu_);
        // Tensors 0, 1 and 2 in one exchange, tensor 3 in another.
        ExpectTwoExchanges(all, one, GetParam(), r);
      },
      kTimeout);
}

// Coalescing stops at the dense-shape bounds (context.h): two tensors of
// 2^22 + 1 elements move alone; five of 2^22 form one group of four (2^24
// elements) and the fifth moves alone. Either batch sends the messages of
// two exchanges, i.e. twice a one-tensor batch's less one metadata round.
// Dense tensors likewise at 2^15 and 2^17.
TEST_P(ContextTest, LargeTensorsAreNotCoalesced) {
  if (GetParam() != "zen" && GetParam() != "agsparse") {
    GTEST_SKIP() << "the bounds are the engine's; two coalescing schemes suffice";
  }
  constexpr int64_t kBig = int64_t{1} << 22;
  const std::vector<SparseTensor> over = Inputs(kBig + 1, 1, 2e-5, 20, "over");
  const std::vector<SparseTensor> at = Inputs(kBig, 1, 2e-5, 21, "at");
  constexpr int64_t kDenseBig = int64_t{1} << 15;
  const std::vector<SparseTensor> dense_over = Inputs(kDenseBig + 1, 1, 0.5, 22, "dense_over");
  const std::vector<SparseTensor> dense_at = Inputs(kDenseBig, 1, 0.5, 23, "dense_at");
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        // A batch of `count` tensors, each this rank's part of `inputs`
        // (sparse, or as a dense buffer); checks every sum against the
        // reference; returns messages sent.
        auto run = [&](const std::string& name, const std::vector<SparseTensor>& inputs,
                       size_t count, bool dense = false) {
          std::vector<SparseTensor> sums(count);
          std::vector<std::vector<float>> buffers(count);
          std::vector<BatchTensor> batch;
          for (size_t t = 0; t < count; ++t) {
            const std::string tensor = name + std::to_string(t);
            if (dense) {
              buffers[t] = inputs[r].ToDense();
              batch.push_back(BatchTensor::Dense(tensor, buffers[t], inputs[r].rows(), 1));
            } else {
              batch.push_back(BatchTensor::Sparse(tensor, inputs[r], &sums[t]));
            }
          }
          const uint64_t before = comm.counters().messages_sent();
          ctx.Sync(name, batch);
          const uint64_t sent = comm.counters().messages_sent() - before;
          const DenseReference reference(inputs);
          std::lock_guard lock(mu_);
          for (size_t t = 0; t < count; ++t) {
            const Agreement a =
                dense ? reference.CompareDense(buffers[t]) : reference.Compare(sums[t]);
            EXPECT_EQ(a.rows_mismatch, 0) << name << t << " rank " << r;
          }
          return sent;
        };
        run("warm", at, 1);  // zen agrees on its seed on first use
        const uint64_t one = run("one", at, 1);
        const uint64_t two_over = run("over", over, 2);
        const uint64_t five_at = run("at", at, 5);
        // The same with dense tensors and their bounds (2^15 and 2^17).
        const uint64_t dense_one = run("dense_one", dense_at, 1, /*dense=*/true);
        const uint64_t dense_two_over = run("dense_over", dense_over, 2, /*dense=*/true);
        const uint64_t dense_five_at = run("dense_at", dense_at, 5, /*dense=*/true);
        std::lock_guard lock(mu_);
        EXPECT_EQ(two_over, 2 * one - (kWorld - 1)) << "rank " << r;
        EXPECT_EQ(five_at, 2 * one - (kWorld - 1)) << "rank " << r;
        EXPECT_EQ(dense_two_over, 2 * dense_one - (kWorld - 1)) << "rank " << r;
        EXPECT_EQ(dense_five_at, 2 * dense_one - (kWorld - 1)) << "rank " << r;
      },
      kTimeout);
}

// One rank's batch has another shape for one tensor: every rank raises
// MismatchError naming that tensor; the context works afterwards.
TEST_P(ContextTest, DifferentTensorsFailEveryRankNamingTheTensor) {
  const Bucket b;
  std::vector<std::string> what(kWorld);
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<float> a = b.inputs[0][r].ToDense();
        std::vector<float> c = b.inputs[1][r].ToDense();
        const int64_t rows = comm.rank() == 1 ? 250 : 500;  // same buffer, other shape
        std::vector<BatchTensor> batch = {
            BatchTensor::Dense(b.names[1], c, 37, 1),
            BatchTensor::Dense(b.names[0], a, rows, 8 * 500 / rows)};
        try {
          ctx.Sync("bucket", batch);
        } catch (const MismatchError& e) {
          std::lock_guard lock(mu_);
          what[r] = e.what();
        }
        ExpectBiasBatchWorks(ctx, b, r);
      },
      kTimeout);
  for (int r = 0; r < kWorld; ++r) {
    const std::string& w = what[static_cast<size_t>(r)];
    EXPECT_NE(w.find("rank " + std::to_string(r)), std::string::npos) << w;
    EXPECT_NE(w.find("tensor 1 ('emb.dense')"), std::string::npos) << w;
    EXPECT_NE(w.find(r == 1 ? "rows 500 on rank 0 vs 250 on rank 1" : "rows 250 on rank 1 vs 500"),
              std::string::npos)
        << w;
  }
}

// Contexts built with another block size on one rank (the schemes' options
// every rank must share, Scheme::shared_settings): every rank raises
// MismatchError naming its own settings, its buffer untouched; the next
// batch with the same settings is exact.
TEST_P(ContextTest, ContextsWithOtherSchemeSettingsFailEveryRank) {
  const Bucket b;
  std::vector<std::string> what(kWorld);
  OnEveryRank([&](Communicator& comm, size_t r) {
    {
      ContextOptions odd = Opt(GetParam());
      if (comm.rank() == 1) odd.scheme_options.block_values = 64;
      Context ctx(comm, odd);
      const std::vector<float> before = b.inputs[1][r].ToDense();
      std::vector<float> c = before;
      std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
      try {
        ctx.Sync("bucket", batch);
      } catch (const MismatchError& e) {
        std::lock_guard lock(mu_);
        what[r] = e.what();
      }
      std::lock_guard lock(mu_);
      EXPECT_EQ(c, before) << "rank " << r << ": the buffer changed although the settings differ";
    }
    Context ctx(comm, Opt(GetParam()));
    ExpectBiasBatchWorks(ctx, b, r);
  });
  for (int r = 0; r < kWorld; ++r) {
    const std::string& w = what[static_cast<size_t>(r)];
    EXPECT_NE(w.find("rank " + std::to_string(r)), std::string::npos) << w;
    EXPECT_NE(w.find("other settings of the scheme"), std::string::npos) << w;
    EXPECT_NE(w.find(r == 1 ? "this rank's settings: block_values 64"
                            : "this rank's settings: the defaults"),
              std::string::npos)
        << w;
  }
}

// Half-width values: "auto" becomes zen and the batch is summed with bfloat16
// on the wire; ranks that disagree on the values all raise MismatchError
// naming the field.
TEST_P(ContextTest, HalfWidthValuesAreAgreedAndUseZen) {
  const Bucket b;
  std::vector<std::string> what(kWorld);
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<float> c = b.inputs[1][r].ToDense();
        std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
        batch[0].values = WireValues::kBfloat16;
        if (GetParam() != "auto" && GetParam() != "zen") {
          // Other schemes send float32 only: every rank refuses.
          try {
            ctx.Sync("bucket", batch);
            ADD_FAILURE() << GetParam() << " accepted bfloat16 values";
          } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("need scheme zen"), std::string::npos) << e.what();
          }
          batch[0].scheme = "zen";
        }
        ctx.Sync("bucket", batch);
        const Agreement agree = DenseReference(b.inputs[1]).CompareDense(c);
        {
          std::lock_guard lock(mu_);
          EXPECT_EQ(agree.rows_mismatch, 0);
          EXPECT_LE(agree.max_rel_error, 3 * 0x1p-8);
          for (const float x : c) EXPECT_EQ(std::bit_cast<uint32_t>(x) & 0xffffu, 0u);
        }
        std::vector<float> d = b.inputs[1][r].ToDense();
        std::vector<BatchTensor> odd = {BatchTensor::Dense(b.names[1], d, 37, 1)};
        odd[0].scheme = batch[0].scheme;
        if (comm.rank() == 1) odd[0].values = WireValues::kFloat16;
        try {
          ctx.Sync("bucket", odd);
        } catch (const MismatchError& e) {
          std::lock_guard lock(mu_);
          what[r] = e.what();
        }
      },
      kTimeout);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(what[static_cast<size_t>(r)].find("values"), std::string::npos)
        << "rank " << r << ": " << what[static_cast<size_t>(r)];
  }
}

// A dense tensor may carry a sum order (Gloo's ring order, for bit-for-bit
// DDP): zen adds each element's contributions cyclically downward from the
// step's start rank; auto means zen; other schemes refuse on every rank; a
// rank with other steps fails on every rank.
TEST_P(ContextTest, SumOrderIsAgreedAndUsesZen) {
  const Bucket b;
  const std::vector<std::pair<int64_t, int>> order = {{0, 2}, {11, 0}, {25, 1}};
  // Independent reference: the order written out per element.
  std::vector<std::vector<float>> in(kWorld);
  for (int r = 0; r < kWorld; ++r) in[static_cast<size_t>(r)] = b.inputs[1][static_cast<size_t>(r)].ToDense();
  const std::vector<float> want = SumInOrder(in, order);
  std::vector<std::string> what(kWorld), invalid(kWorld);
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<float> c = in[r];
        std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
        batch[0].sum_order = order;
        if (GetParam() != "auto" && GetParam() != "zen") {
          try {
            ctx.Sync("bucket", batch);
            ADD_FAILURE() << GetParam() << " accepted a sum order";
          } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find("sum order needs"), std::string::npos) << e.what();
          }
          batch[0].scheme = "zen";
        }
        ctx.Sync("bucket", batch);
        {
          std::lock_guard lock(mu_);
          for (size_t e = 0; e < c.size(); ++e) {
            EXPECT_EQ(std::bit_cast<uint32_t>(c[e]), std::bit_cast<uint32_t>(want[e]))
                << "rank " << r << " element " << e;
          }
        }
        std::vector<float> d = in[r];
        std::vector<BatchTensor> odd = {BatchTensor::Dense(b.names[1], d, 37, 1)};
        odd[0].scheme = batch[0].scheme;
        odd[0].sum_order = order;
        if (comm.rank() == 1) odd[0].sum_order[1].second = 2;
        try {
          ctx.Sync("bucket", odd);
        } catch (const MismatchError& e) {
          std::lock_guard lock(mu_);
          what[r] = e.what();
        }
        std::vector<float> f = in[r];
        std::vector<BatchTensor> bad = {BatchTensor::Dense(b.names[1], f, 37, 1)};
        bad[0].scheme = batch[0].scheme;
        bad[0].sum_order = order;
        if (comm.rank() == 2) bad[0].sum_order[2].second = kWorld;  // no such rank
        try {
          ctx.Sync("bucket", bad);
        } catch (const InvalidArgument& e) {
          std::lock_guard lock(mu_);
          invalid[r] = e.what();
        }
      },
      kTimeout);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(what[static_cast<size_t>(r)].find("sum order"), std::string::npos)
        << "rank " << r << ": " << what[static_cast<size_t>(r)];
    // Rank 2 names its step; the others name rank 2.
    EXPECT_NE(invalid[static_cast<size_t>(r)].find(r == 2 ? "sum order step 2" : "rank 2 rejected"),
              std::string::npos)
        << "rank " << r << ": " << invalid[static_cast<size_t>(r)];
  }
}

// BatchTensor::rank_order: the sparse sum is the ranks' values added in
// ascending rank order, bit for bit, on every call (auto's timed calls
// included: it times only schemes that sum so); a scheme that does not is
// InvalidArgument on every rank.
TEST_P(ContextTest, RankOrderIsHonouredOrRefused) {
  const Bucket b;
  const std::vector<SparseTensor>& in = b.inputs[3];
  const std::vector<float> want = SumInRankOrder(in);
  const bool honours = SchemeRegistry::SumsInRankOrder(*AllSchemes().Find(GetParam()));
  std::vector<std::string> refused(kWorld);
  testing::RunRanks(
      Backend::kInProc, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        for (int call = 0; call < 16; ++call) {  // past auto's timed calls
          SparseTensor sum;
          std::vector<BatchTensor> batch = {BatchTensor::Sparse(b.names[3], in[r], &sum)};
          batch[0].rank_order = true;
          try {
            ctx.Sync("bucket", batch);
          } catch (const InvalidArgument& e) {
            std::lock_guard lock(mu_);
            refused[r] = e.what();
            return;
          }
          const std::vector<float> got = sum.ToDense();
          std::lock_guard lock(mu_);
          int64_t differ = 0;
          for (size_t e = 0; e < want.size(); ++e) {
            differ += std::bit_cast<uint32_t>(got[e]) != std::bit_cast<uint32_t>(want[e]);
          }
          ASSERT_EQ(differ, 0) << "rank " << r << " call " << call;
        }
        if (GetParam() == "auto") {
          const auto& a = dynamic_cast<const AutoScheme&>(ctx.scheme("auto", true));
          const AutoDecision* d = a.decision(b.names[3]);
          std::lock_guard lock(mu_);
          ASSERT_NE(d, nullptr);
          EXPECT_TRUE(AllSchemes().Find(d->chosen)->rank_order) << d->chosen;
          for (const std::string& id : d->shortlist) EXPECT_TRUE(AllSchemes().Find(id)->rank_order) << id;
        }
      },
      kTimeout);
  for (int r = 0; r < kWorld; ++r) {
    if (honours) {
      EXPECT_EQ(refused[static_cast<size_t>(r)], "") << "rank " << r;
    } else {
      EXPECT_NE(refused[static_cast<size_t>(r)].find("does not sum in rank order"), std::string::npos)
          << "rank " << r << ": " << refused[static_cast<size_t>(r)];
    }
  }
}

// A rank that cannot take part (e.g. a dtype its binding refused) fails the
// batch on every rank with InvalidArgument; the next batch works.
TEST_P(ContextTest, RejectedInputFailsEveryRank) {
  const Bucket b;
  std::vector<std::string> what(kWorld);
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        std::vector<float> c = b.inputs[1][r].ToDense();
        std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
        if (comm.rank() == 2) batch[0].error = "dtype float16 is not synchronized";
        try {
          ctx.Sync("bucket", batch);
        } catch (const InvalidArgument& e) {
          std::lock_guard lock(mu_);
          what[r] = e.what();
        }
        batch[0].error.clear();
        ctx.Sync("bucket", batch);
        const Agreement agree = DenseReference(b.inputs[1]).CompareDense(c);
        std::lock_guard lock(mu_);
        EXPECT_EQ(agree.rows_mismatch, 0);
      },
      kTimeout);
  EXPECT_NE(what[2].find("float16"), std::string::npos) << what[2];
  EXPECT_NE(what[0].find("rank 2 rejected"), std::string::npos) << what[0];
  EXPECT_NE(what[1].find("rank 2 rejected"), std::string::npos) << what[1];
}

// Rank 0 starts a batch the others do not: that batch and every later one
// fail on every rank, and no buffer is changed.
TEST_P(ContextTest, ExtraBatchOnOneRankNeverReturnsAWrongSum) {
  const Bucket b;
  std::atomic<int> mismatches{0};
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        const std::vector<float> original = b.inputs[1][r].ToDense();
        std::vector<float> c = original;
        std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
        std::vector<Handle> handles;
        if (comm.rank() == 0) handles.push_back(ctx.Start("extra", batch));
        for (int k = 0; k < 3; ++k) handles.push_back(ctx.Start("bucket", batch));
        for (const Handle& h : handles) {
          try {
            h.Wait();
          } catch (const MismatchError&) {
            ++mismatches;
          }
        }
        std::lock_guard lock(mu_);
        EXPECT_EQ(c, original) << "rank " << r << ": a buffer was changed";
      },
      kTimeout);
  EXPECT_EQ(mismatches.load(), 3 * kWorld + 1);
}

// on_done runs once per batch, on completion, with the batch's error.
TEST_P(ContextTest, CompletionCallbackRunsOnce) {
  const Bucket b;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        std::atomic<int> ok{0}, failed{0};
        {
          Context ctx(comm, Opt(GetParam()));
          std::vector<float> c = b.inputs[1][r].ToDense();
          std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
          std::vector<BatchTensor> bad = {BatchTensor::Dense(b.names[1], c, 36, 1)};
          ctx.Start("a", batch, [&](std::exception_ptr e) { ++(e ? failed : ok); });
          ctx.Start("b", bad, [&](std::exception_ptr e) { ++(e ? failed : ok); });
          ctx.Start("c", batch, [&](std::exception_ptr e) { ++(e ? failed : ok); });
          ctx.Drain();
        }
        std::lock_guard lock(mu_);
        EXPECT_EQ(ok.load(), 2) << "rank " << r;
        EXPECT_EQ(failed.load(), 1) << "rank " << r;
      },
      kTimeout);
}

// What a framework does (torch futures, a DDP hook): one thread starts the
// batches, another polls Test() and then waits, and on_done (progress
// thread) records the completion. Every sum equals the reference, read on
// a thread that did not start the batch once its handle completes; on_done
// ran once per batch (it runs after the handle completes: Drain() waits for
// it). scripts/tsan checks the order of these accesses.
TEST_P(ContextTest, HandlesCompleteOnOtherThreads) {
  const Bucket b;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        Context ctx(comm, Opt(GetParam()));
        constexpr int kBatches = 4;
        std::vector<std::vector<float>> dense(kBatches);
        std::vector<SparseTensor> sums(kBatches);
        std::vector<std::vector<BatchTensor>> batches(kBatches);
        std::vector<Handle> handles(kBatches);
        std::vector<int> done_calls(kBatches, 0);  // written by on_done
        std::mutex handles_mu;
        std::condition_variable started;
        int count = 0;  // handles started, under handles_mu
        std::thread waiter([&] {
          for (int k = 0; k < kBatches; ++k) {
            Handle h;
            {
              std::unique_lock lock(handles_mu);
              started.wait(lock, [&] { return count > k; });
              h = handles[static_cast<size_t>(k)];
            }
            while (!h.Test()) std::this_thread::yield();
            h.Wait();
            const Agreement d = DenseReference(b.inputs[1]).CompareDense(dense[k]);
            const Agreement s = DenseReference(b.inputs[3]).Compare(sums[k]);
            std::lock_guard lock(mu_);
            const std::string what = "rank " + std::to_string(r) + " batch " + std::to_string(k);
            ExpectAgrees(d, "dense, " + what);
            ExpectAgrees(s, "sparse, " + what);
          }
        });
        for (int k = 0; k < kBatches; ++k) {
          const size_t i = static_cast<size_t>(k);
          dense[i] = b.inputs[1][r].ToDense();
          batches[i].push_back(BatchTensor::Dense(b.names[1], dense[i], 37, 1));
          batches[i].push_back(BatchTensor::Sparse(b.names[3], b.inputs[3][r], &sums[i]));
          Handle h = ctx.Start("bucket" + std::to_string(k), batches[i],
                               [&done_calls, i](std::exception_ptr e) {
                                 if (!e) ++done_calls[i];
                               });
          std::lock_guard lock(handles_mu);
          handles[i] = h;
          ++count;
          started.notify_one();
        }
        waiter.join();
        // on_done runs after the handle completes: Drain() waits for it.
        ctx.Drain();
        std::lock_guard lock(mu_);
        for (int k = 0; k < kBatches; ++k) {
          EXPECT_EQ(done_calls[static_cast<size_t>(k)], 1) << "rank " << r << " batch " << k;
        }
      },
      kTimeout);
}

// float64 tensors of a batch (dense, sparse, sparse into a dense buffer) are
// summed in float64 by every scheme here (each declares float64; auto: an
// entry that does): 1e10 + 1 - 1e10 is 1 (0 in float32), 1e300 stays (inf
// in float32).
TEST_P(ContextTest, Float64TensorsAreSummedInFloat64) {
  testing::RunRanks(
      Backend::kInProc, kWorld,
      [&](Communicator& comm) {
        const int r = comm.rank();
        Context ctx(comm, Opt(GetParam()));
        const std::vector<double> mine = {r == 0 ? 1e10 : r == 1 ? 1.0 : -1e10,
                                          r == 0 ? 1e300 : 0.0, 0.0, 2.0};
        std::vector<double> dense = mine;  // [2 x 2]
        const SparseTensor sparse = SparseTensor::FromSorted(2, 2, {0, 1}, mine, "s");
        SparseTensor sum;
        std::vector<double> into(4, 7.0);
        std::vector<BatchTensor> batch = {
            BatchTensor::Dense("d", std::span<double>(dense), 2, 2),
            BatchTensor::Sparse("s", sparse, &sum),
            BatchTensor::SparseInto("i", sparse, std::span<double>(into), 2.0)};
        ctx.Sync("bucket", batch);
        const std::vector<double> want = {1.0, 1e300, 0.0, 6.0};
        std::lock_guard lock(mu_);
        EXPECT_EQ(dense, want) << "rank " << r;
        EXPECT_EQ(sum.dtype(), DType::kFloat64);
        EXPECT_TRUE(std::ranges::equal(sum.values<double>(), want)) << "rank " << r;
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(into[i], want[i] / 2.0) << i;
        }
      },
      kTimeout);
}

// bfloat16 and float16 tensors of a batch (dense, sparse, sparse into a
// dense buffer) are summed in float where the scheme declares them (auto:
// an entry that does) and rounded to 16 bits: 1 + 2^-8 + 2^-8 is 1 + 2^-7
// rounded once (1 when rounded after each addition, on the ring and
// sparcml; both are within the dtype's rounding; zen rounds once: exactly
// 1 + 2^-7). Wire values on a 16-bit tensor are refused.
TEST_P(ContextTest, SixteenBitTensorsAreSummedAtTheirOwnWidth) {
  const bool rounds_once = GetParam() == std::string("zen");
  testing::RunRanks(
      Backend::kInProc, kWorld,
      [&](Communicator& comm) {
        const int r = comm.rank();
        Context ctx(comm, Opt(GetParam()));
        // Row 0: 1, 2^-8, 2^-8 over the ranks; row 1: 2 on rank 0 only.
        const std::vector<float> mine = {r == 0 ? 1.0f : 0x1p-8f, 3.0f, r == 0 ? 2.0f : 0.0f, 0.5f};
        std::vector<Bfloat16> dense;
        std::vector<Float16> values;
        for (float v : mine) dense.push_back(Narrow<Bfloat16>(v));
        for (float v : mine) values.push_back(Narrow<Float16>(v));
        const SparseTensor sparse = SparseTensor::FromSorted(2, 2, {0, 1}, values, "s");
        SparseTensor sum;
        std::vector<Float16> into(4, Narrow<Float16>(7.0f));
        std::vector<BatchTensor> batch = {
            BatchTensor::Dense("d", std::span<Bfloat16>(dense), 2, 2),
            BatchTensor::Sparse("s", sparse, &sum),
            BatchTensor::SparseInto("i", sparse, std::span<Float16>(into), 2.0)};
        ctx.Sync("bucket", batch);
        std::vector<BatchTensor> wire = {BatchTensor::Dense("w", std::span<Bfloat16>(dense), 2, 2)};
        wire[0].values = WireValues::kFloat16;
        EXPECT_THROW(ctx.Sync("wire", wire), InvalidArgument);
        const std::vector<float> want = {1.0f + 0x1p-7f, 9.0f, 2.0f, 1.5f};
        std::lock_guard lock(mu_);
        for (size_t i = 0; i < want.size(); ++i) {
          // Exact but for row 0, column 0: 1 + 2^-7 or, rounded per hop, 1.
          const float tol = i == 0 && !rounds_once ? 0x1p-7f : 0.0f;
          EXPECT_NEAR(Widen(dense[i]), want[i], tol) << "rank " << r << " " << i;
          EXPECT_NEAR(Widen(sum.values<Float16>()[i]), want[i], tol) << "rank " << r << " " << i;
          EXPECT_NEAR(Widen(into[i]), want[i] / 2, tol / 2) << "rank " << r << " " << i;
        }
        EXPECT_EQ(sum.dtype(), DType::kFloat16);
      },
      kTimeout);
}

// The ranks' float32 inputs as values of T (each value rounded to T once).
template <typename T>
std::vector<SparseTensor> AsValueType(const std::vector<SparseTensor>& inputs) {
  std::vector<SparseTensor> out;
  for (const SparseTensor& in : inputs) {
    std::vector<T> values;
    for (float v : in.values()) values.push_back(Narrow<T>(static_cast<AccumOf<T>>(v)));
    out.push_back(SparseTensor::FromSorted<T>(
        in.rows(), in.width(), std::vector<int64_t>(in.ids().begin(), in.ids().end()),
        std::move(values), in.name()));
  }
  return out;
}

template <typename T>
void ExpectSameBytes(std::span<const T> got, std::span<const T> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const std::span<const std::byte> a = std::as_bytes(got), b = std::as_bytes(want);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], b[i]) << what << " value " << i / sizeof(T);
  }
}

// The reference's tolerance for sums of T: float64 is exact but for the
// order of additions; 16-bit sums are rounded to T (per hop on the ring
// and sparcml).
template <typename T>
double Tolerance() {
  if constexpr (std::is_same_v<T, double>) return 1e-12;
  if constexpr (std::is_same_v<T, Bfloat16>) return 0x1p-5;
  return 0x1p-8;
}

// Sparse tensors of one width and dense tensors of one width, of dtype T,
// each kind in a batch of its own: a coalescing scheme sends a batch's
// tensors as one exchange (as many messages as a batch of one tensor),
// and each sum is bit for bit what a call of its own gives; every sum
// matches the independent reference.
template <typename T>
void ExpectCoalescedAsAlone(const std::string& scheme, std::mutex& mu) {
  const std::string type = DTypeName(DTypeOf<T>);
  const std::vector<std::string> sparse_names = {"emb.a", "emb.one", "emb.none", "emb.into"};
  const std::vector<std::vector<SparseTensor>> sparse = {
      AsValueType<T>(Inputs(700, 4, 0.05, 41, sparse_names[0])),
      AsValueType<T>(Inputs(1, 4, 1.0, 42, sparse_names[1])),
      std::vector<SparseTensor>(kWorld, SparseTensor::Empty(300, 4, sparse_names[2], DTypeOf<T>)),
      AsValueType<T>(Inputs(400, 4, 0.1, 43, sparse_names[3]))};
  const std::vector<std::string> dense_names = {"norm.a", "bias.b", "zero.c"};
  const std::vector<std::vector<SparseTensor>> dense_in = {
      AsValueType<T>(Inputs(64, 1, 1.0, 44, dense_names[0])),
      AsValueType<T>(Inputs(37, 1, 1.0, 45, dense_names[1])),
      std::vector<SparseTensor>(kWorld, SparseTensor::Empty(20, 1, dense_names[2], DTypeOf<T>))};
  constexpr double kDivisor = 4.0;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        const std::string where = type + " rank " + std::to_string(r);
        Context ctx(comm, Opt(scheme));
        std::vector<SparseTensor> sums(3);
        std::vector<T> into(400 * 4, Narrow<T>(AccumOf<T>{-1}));
        auto run_sparse = [&](size_t tensors) {
          std::vector<BatchTensor> batch;
          for (size_t t = 0; t < std::min<size_t>(tensors, 3); ++t) {
            batch.push_back(BatchTensor::Sparse(sparse_names[t], sparse[t][r], &sums[t]));
          }
          if (tensors == 4) {
            batch.push_back(BatchTensor::SparseInto(sparse_names[3], sparse[3][r],
                                                    std::span<T>(into), kDivisor));
          }
          const uint64_t before = comm.counters().messages_sent();
          ctx.Sync(type + ".sparse" + std::to_string(tensors), batch);
          return comm.counters().messages_sent() - before;
        };
        std::vector<std::vector<T>> dense(dense_names.size());
        auto run_dense = [&](size_t tensors) {
          std::vector<BatchTensor> batch;
          for (size_t t = 0; t < tensors; ++t) {
            dense[t] = dense_in[t][r].template ToDense<T>();
            batch.push_back(BatchTensor::Dense(dense_names[t], std::span<T>(dense[t]),
                                               dense_in[t][r].rows(), 1));
          }
          const uint64_t before = comm.counters().messages_sent();
          ctx.Sync(type + ".dense" + std::to_string(tensors), batch);
          return comm.counters().messages_sent() - before;
        };
        const auto [sparse_all, sparse_one] = AllAndOne(run_sparse, 4);
        const auto [dense_all, dense_one] = AllAndOne(run_dense, dense_names.size());
        auto own = AllSchemes().Create(scheme);
        for (size_t t = 0; t < sparse_names.size(); ++t) {
          const SparseTensor alone = own->Sync(comm, sparse[t][r]);
          const DenseReference reference(sparse[t]);
          const std::string what = sparse_names[t] + " " + where;
          std::vector<T> expected(into.size());
          if (t == 3) WriteInto(alone, std::span<T>(expected), kDivisor);
          std::lock_guard lock(mu);
          if (t < 3) {
            const Agreement a = reference.Compare(sums[t]);
            EXPECT_LE(a.max_rel_error, Tolerance<T>()) << what;
            EXPECT_EQ(a.rows_mismatch, 0) << what;
            EXPECT_EQ(sums[t].dtype(), DTypeOf<T>) << what;
            EXPECT_EQ(sums[t].name(), sparse_names[t]) << what;
          }
          if (scheme == "auto") continue;  // may choose another scheme for the whole
          if (t < 3) {
            EXPECT_TRUE(std::ranges::equal(sums[t].ids(), alone.ids())) << what;
            ExpectSameBytes(sums[t].values<T>(), alone.values<T>(), what);
          } else {
            ExpectSameBytes(std::span<const T>(into), std::span<const T>(expected), what);
          }
        }
        for (size_t t = 0; t < dense_names.size(); ++t) {
          std::vector<T> alone = dense_in[t][r].template ToDense<T>();
          own->SyncDense(comm, std::span<T>(alone), dense_in[t][r].rows(), 1, dense_names[t]);
          const Agreement a = DenseReference(dense_in[t]).CompareDense(std::span<const T>(dense[t]));
          const std::string what = dense_names[t] + " " + where;
          std::lock_guard lock(mu);
          EXPECT_LE(a.max_rel_error, Tolerance<T>()) << what;
          if (scheme == "auto") continue;
          ExpectSameBytes(std::span<const T>(dense[t]), std::span<const T>(alone), what);
        }
        if (scheme == "auto") return;  // auto's profiling rounds depend on its schedule
        std::lock_guard lock(mu);
        if (Coalesces(scheme)) {
          EXPECT_EQ(sparse_all, sparse_one) << where << ": the sparse tensors were not coalesced";
          EXPECT_EQ(dense_all, dense_one) << where << ": the dense tensors were not coalesced";
        } else {
          EXPECT_GT(sparse_all, sparse_one) << where;
          EXPECT_GT(dense_all, dense_one) << where;
        }
      },
      kTimeout);
}

// Every dtype coalesces: float64, bfloat16 and float16 batches as the float32
// ones above (a 16-bit sum rounds where it rounds alone).
TEST_P(ContextTest, TensorsOfEveryDTypeCoalesceAndMatchTheirOwnCalls) {
  ExpectCoalescedAsAlone<double>(GetParam(), mu_);
  ExpectCoalescedAsAlone<Bfloat16>(GetParam(), mu_);
  ExpectCoalescedAsAlone<Float16>(GetParam(), mu_);
}

// The engine reads what a registry entry declares, never its id: auto's
// entry registered as "pick" (SchemeInfo::selector) is routed like auto. A
// dense tensor with a sum order goes to the first entry that declares one
// (summed in that order, bit for bit); a sparse tensor that requires rank
// order is summed in rank order by the entry's rank_order_factory (a
// selector choosing among rank-order schemes only); sparse tensors of one
// width coalesce ("pick-zen", forced to zen: the batch sends what one tensor
// does). The same entry without the flag and factory ("plain") refuses
// the sum order and the rank order, and does not coalesce.
TEST(ContextRegistryTest, AnEntryDeclaredASelectorIsRoutedLikeAuto) {
  AutoOptions forced;
  forced.force = "zen";
  SchemeInfo pick = AutoSchemeInfo();
  pick.id = "pick";
  SchemeInfo pick_zen = AutoSchemeInfo(forced);
  pick_zen.id = "pick-zen";
  SchemeInfo plain = AutoSchemeInfo(forced);
  plain.id = "plain";
  plain.selector = false;
  plain.rank_order_factory = {};
  SchemeRegistry registry = BuiltinSchemes();
  for (SchemeInfo* info : {&pick, &pick_zen, &plain}) registry.Add(*info);

  const Bucket b;
  const std::vector<SumStep> order = {{0, 2}, {11, 0}, {25, 1}};
  std::vector<std::vector<float>> bias(kWorld);
  for (size_t r = 0; r < kWorld; ++r) bias[r] = b.inputs[1][r].ToDense();
  const std::vector<float> want_ordered = SumInOrder(bias, order);
  const std::vector<float> want_ranked = SumInRankOrder(b.inputs[3]);
  std::mutex mu;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        const size_t r = static_cast<size_t>(comm.rank());
        ContextOptions options;
        options.registry = registry;
        options.scheme = "pick";
        Context ctx(comm, options);
        // A sum order: routed to an entry that declares it, or refused.
        for (const std::string scheme : {"pick", "plain"}) {
          std::vector<float> c = bias[r];
          std::vector<BatchTensor> batch = {BatchTensor::Dense(b.names[1], c, 37, 1)};
          batch[0].scheme = scheme;
          batch[0].sum_order = order;
          if (scheme == "plain") {
            try {
              ctx.Sync("ordered", batch);
              std::lock_guard lock(mu);
              ADD_FAILURE() << "plain accepted a sum order";
            } catch (const InvalidArgument& e) {
              std::lock_guard lock(mu);
              EXPECT_NE(std::string(e.what()).find("sum order needs"), std::string::npos) << e.what();
            }
            continue;
          }
          ctx.Sync("ordered", batch);
          std::lock_guard lock(mu);
          ExpectSameBits(c, want_ordered, "pick with a sum order, rank " + std::to_string(r));
        }
        // Rank order: honoured by the selector, refused by the plain entry.
        for (const std::string scheme : {"pick", "plain"}) {
          SparseTensor sum;
          std::vector<BatchTensor> batch = {BatchTensor::Sparse(b.names[3], b.inputs[3][r], &sum)};
          batch[0].scheme = scheme;
          batch[0].rank_order = true;
          if (scheme == "plain") {
            try {
              ctx.Sync("ranked", batch);
              std::lock_guard lock(mu);
              ADD_FAILURE() << "plain accepted rank order";
            } catch (const InvalidArgument& e) {
              std::lock_guard lock(mu);
              EXPECT_NE(std::string(e.what()).find("does not sum in rank order"), std::string::npos)
                  << e.what();
            }
            continue;
          }
          ctx.Sync("ranked", batch);
          const auto& chooser = dynamic_cast<const AutoScheme&>(ctx.scheme("pick", true));
          const AutoDecision* d = chooser.decision(b.names[3]);
          std::lock_guard lock(mu);
          ExpectSameBits(sum.ToDense(), want_ranked, "pick in rank order, rank " + std::to_string(r));
          ASSERT_NE(d, nullptr);
          EXPECT_TRUE(AllSchemes().Find(d->chosen)->rank_order) << d->chosen;
        }
        // Coalescing: three sparse tensors of one width against one.
        auto messages = [&](const std::string& scheme, size_t tensors) {
          std::vector<SparseTensor> sums(tensors);
          std::vector<BatchTensor> batch;
          for (size_t t = 0; t < tensors; ++t) {
            batch.push_back(BatchTensor::Sparse("emb" + std::to_string(t), b.inputs[3][r], &sums[t]));
            batch.back().scheme = scheme;
          }
          const uint64_t before = comm.counters().messages_sent();
          ctx.Sync(scheme + std::to_string(tensors), batch);
          const uint64_t sent = comm.counters().messages_sent() - before;
          const DenseReference reference(b.inputs[3]);
          std::lock_guard lock(mu);
          for (const SparseTensor& s : sums) ExpectAgrees(reference.Compare(s), scheme);
          return sent;
        };
        for (const std::string scheme : {"pick-zen", "plain"}) {
          messages(scheme, 3);  // zen agrees on its seed on first use
          const uint64_t three = messages(scheme, 3);
          const uint64_t one = messages(scheme, 1);
          std::lock_guard lock(mu);
          if (scheme == "plain") {
            EXPECT_GT(three, one) << "rank " << r << ": plain coalesced";
          } else {
            EXPECT_EQ(three, one) << "rank " << r << ": pick-zen did not coalesce";
          }
        }
      },
      kTimeout);
}

INSTANTIATE_TEST_SUITE_P(Schemes, ContextTest,
                         ::testing::Values("zen", "agsparse", "sparcml", "dense", "omnireduce", "auto"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zen
