// Every scheme of AllSchemes() (auto included) over real Gloo TCP, with one
// thread per rank: bad input on one rank, ranks that disagree on rows /
// width / dtype / scheme / call order / shared settings, and NaN / Inf
// values; and with one process per rank (AllSchemesOverflowProcesses):
// shapes near int64 limits.
//
// Each error must be raised on every rank (the odd one out included), name
// the rank, the tensor and the wrong value, and leave the communicator
// usable: every test ends with an agreeing call checked against the
// independent dense reference. NaN and Inf are data, not errors: they must
// come out exactly where a dense sum puts them, with no row dropped or
// invented on their account.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

#include "zen/analysis/auto_scheme.h"
#include "zen/comm/collectives.h"
#include "zen/comm/gloo_communicator.h"
#include "zen/testing/ranks.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/zen/zen.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

constexpr int kWorld = 3;
constexpr int64_t kRows = 2000;
constexpr int64_t kWidth = 4;
constexpr auto kTimeout = std::chrono::seconds(20);
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// What one rank saw in one sub-case.
struct Outcome {
  std::string kind;  // "", "InvalidArgument", "MismatchError", "FormatError", "TransportError"
  std::string what;
};

template <typename F>
Outcome Capture(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return {"InvalidArgument", e.what()};
  } catch (const MismatchError& e) {
    return {"MismatchError", e.what()};
  } catch (const FormatError& e) {
    return {"FormatError", e.what()};
  } catch (const TransportError& e) {
    return {"TransportError", e.what()};
  }
  return {};
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<SparseTensor> Inputs(int64_t rows, int64_t width, uint64_t seed) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.width = width;
  spec.density = 0.05;
  spec.skew = 1.1;
  spec.seed = seed;
  std::vector<SparseTensor> in = GenerateSynthetic(spec, kWorld);
  for (auto& t : in) t.set_name("emb");
  return in;
}

class AllSchemesOverGloo : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Scheme> Make() const { return AllSchemes().Create(GetParam()); }

  // One agreeing call after the failures: the sum must equal the reference
  // on every rank (the communicator and the scheme are still usable).
  void ExpectGoodCall(Communicator& comm, Scheme& scheme) {
    const std::vector<SparseTensor> in = Inputs(kRows, kWidth, 99);
    const SparseTensor sum = scheme.Sync(comm, in[static_cast<size_t>(comm.rank())]);
    const Agreement a = DenseReference(in).Compare(sum);
    std::lock_guard lock(mu_);
    EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << comm.rank();
    EXPECT_EQ(a.rows_mismatch, 0) << "rank " << comm.rank();
  }

  void Record(size_t c, int rank, Outcome o) {
    std::lock_guard lock(mu_);
    if (outcomes_.size() <= c) outcomes_.resize(c + 1, std::vector<Outcome>(kWorld));
    outcomes_[c][static_cast<size_t>(rank)] = std::move(o);
  }

  // Every rank raised `kind`; the bad rank's message has all of `bad_parts`.
  void ExpectEverywhere(size_t c, const std::string& kind, int bad_rank,
                        const std::vector<std::string>& bad_parts, const std::string& label) {
    ASSERT_LT(c, outcomes_.size()) << label;
    for (int r = 0; r < kWorld; ++r) {
      const Outcome& o = outcomes_[c][static_cast<size_t>(r)];
      EXPECT_EQ(o.kind, kind) << label << ", rank " << r << ": " << o.what;
      EXPECT_TRUE(Has(o.what, "rank " + std::to_string(r))) << label << ": " << o.what;
      EXPECT_TRUE(Has(o.what, "'emb'")) << label << ": " << o.what;
      EXPECT_TRUE(Has(o.what, "rank " + std::to_string(bad_rank))) << label << ": " << o.what;
      if (r == bad_rank) {
        for (const std::string& p : bad_parts)
          EXPECT_TRUE(Has(o.what, p)) << label << ": " << o.what;
      }
      // What users see (docs/reliability.md quotes these lines).
      if (GetParam() == "zen" && (r == bad_rank || r == (bad_rank + 1) % kWorld)) {
        std::printf("[%s] %s: %s\n", label.c_str(), o.kind.c_str(), o.what.c_str());
      }
    }
  }

  std::mutex mu_;
  std::vector<std::vector<Outcome>> outcomes_;  // [sub-case][rank]
};

// The documented pattern for input that cannot even be built: the rank
// that fails reports the error through the metadata exchange of the call
// its peers are making (what zen.torch does), so nobody waits for it.
void SyncOrReport(Communicator& comm, Scheme& scheme, int64_t rows, int64_t width,
                  std::vector<int64_t> ids, std::vector<float> values, Duplicates duplicates) {
  SparseTensor local;
  std::string error;
  try {
    local =
        SparseTensor::FromCoo(rows, width, std::move(ids), std::move(values), duplicates, "emb");
  } catch (const InvalidArgument& e) {
    error = e.what();
  }
  if (!error.empty()) {
    CheckRanksAgree(comm, scheme.name(), rows, width, "emb", error);
    return;  // not reached: CheckRanksAgree throws with a local error
  }
  scheme.Sync(comm, local);
}

TEST_P(AllSchemesOverGloo, BadInputOnOneRankFailsEveryRankThenWorks) {
  struct BadCase {
    std::string label;
    std::vector<int64_t> ids;
    size_t values;  // floats given
    Duplicates duplicates;
    std::vector<std::string> parts;  // in the bad rank's message
  };
  const std::vector<BadCase> cases = {
      {"id outside", {3, 9000}, 2 * kWidth, Duplicates::kReject, {"id 9000", "position 1", "2000"}},
      {"negative id", {-1}, kWidth, Duplicates::kSum, {"id -1", "position 0"}},
      {"duplicate (strict)", {5, 7, 5}, 3 * kWidth, Duplicates::kReject, {"duplicate id 5"}},
      {"values length", {1, 2}, 2 * kWidth - 1, Duplicates::kSum, {"values has 7 floats", "8"}},
  };
  const int bad = 1;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        auto scheme = Make();
        const std::vector<SparseTensor> good = Inputs(kRows, kWidth, 5);
        const SparseTensor& mine = good[static_cast<size_t>(comm.rank())];
        for (size_t c = 0; c < cases.size(); ++c) {
          Record(c, comm.rank(), Capture([&] {
                   if (comm.rank() == bad) {
                     SyncOrReport(comm, *scheme, kRows, kWidth, cases[c].ids,
                                  std::vector<float>(cases[c].values, 1.0f), cases[c].duplicates);
                   } else {
                     scheme->Sync(comm, mine);
                   }
                 }));
        }
        // A placeholder (0 x 0) tensor on one rank: caught by Sync itself.
        Record(cases.size(), comm.rank(),
               Capture([&] { scheme->Sync(comm, comm.rank() == bad ? SparseTensor() : mine); }));
        ExpectGoodCall(comm, *scheme);
      },
      kTimeout);
  for (size_t c = 0; c < cases.size(); ++c) {
    ExpectEverywhere(c, "InvalidArgument", bad, cases[c].parts, cases[c].label);
  }
  // The placeholder has no name: the others name the tensor, rank 1 says why.
  for (int r = 0; r < kWorld; ++r) {
    const Outcome& o = outcomes_[cases.size()][static_cast<size_t>(r)];
    EXPECT_EQ(o.kind, "InvalidArgument") << o.what;
    EXPECT_TRUE(Has(o.what, r == bad ? "shape [0, 0]" : "rank 1 rejected")) << o.what;
  }
}

TEST_P(AllSchemesOverGloo, BadDenseBuffersFailEveryRankThenWork) {
  const int bad = 2;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        auto scheme = Make();
        std::vector<float> buffer(static_cast<size_t>(kRows * kWidth), 0.5f);
        const bool me = comm.rank() == bad;
        // Length mismatch on one rank.
        Record(0, comm.rank(), Capture([&] {
                 std::span<float> b(buffer);
                 scheme->SyncDense(comm, me ? b.first(b.size() - 3) : b, kRows, kWidth, "emb");
               }));
        // Width 0 and rows 0 on one rank (the others are fine).
        Record(1, comm.rank(), Capture([&] {
                 scheme->SyncDense(comm, me ? std::span<float>() : std::span<float>(buffer), kRows,
                                   me ? 0 : kWidth, "emb");
               }));
        Record(2, comm.rank(), Capture([&] {
                 scheme->SyncDense(comm, me ? std::span<float>() : std::span<float>(buffer),
                                   me ? 0 : kRows, kWidth, "emb");
               }));
        // Width 0 everywhere: every rank rejects its own input.
        Record(3, comm.rank(), Capture([&] { scheme->SyncDense(comm, std::span<float>{}, kRows, 0, "emb"); }));
        ExpectGoodCall(comm, *scheme);
      },
      kTimeout);
  ExpectEverywhere(0, "InvalidArgument", bad, {"7997 floats", "2000", "4"}, "short buffer");
  ExpectEverywhere(1, "InvalidArgument", bad, {"shape [2000, 0]"}, "width 0");
  ExpectEverywhere(2, "InvalidArgument", bad, {"shape [0, 4]"}, "rows 0");
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(Has(outcomes_[3][static_cast<size_t>(r)].what, "shape [2000, 0]"))
        << outcomes_[3][static_cast<size_t>(r)].what;
  }
}

// A test-only copy of the metadata message of scheme.cc (56 bytes), to make
// a rank claim what the API cannot produce (another dtype, a corrupt magic).
struct WireMeta {
  uint64_t magic = 0x7A656E6D65746132ULL;
  int64_t rows = 0;
  int64_t width = 0;
  uint64_t scheme = 0;
  uint64_t call = 0;
  uint64_t key = 0;    // Fnv1a of the tensor name
  uint64_t flags = 1;  // dtype in bits 0-7 (1 = float32), bit 8 = bad input
};
static_assert(sizeof(WireMeta) == 56);

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  return h;
}

// Takes part in a metadata exchange with a hand-made message.
void SendRawMeta(Communicator& comm, const WireMeta& meta) {
  const int n = comm.size();
  std::vector<WireMeta> got(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> pending;
  for (int s = 1; s < n; ++s) {
    const int from = (comm.rank() - s + n) % n;
    pending.push_back(comm.Recv(
        from, kControlTag, std::as_writable_bytes(std::span(&got[static_cast<size_t>(from)], 1))));
  }
  for (int s = 1; s < n; ++s) {
    pending.push_back(
        comm.Send((comm.rank() + s) % n, kControlTag, std::as_bytes(std::span(&meta, 1))));
  }
  for (auto& p : pending) p->Wait();
}

TEST_P(AllSchemesOverGloo, RanksThatDisagreeFailEveryRankBeforeDataMoves) {
  const int odd = 2;
  const std::string other = GetParam() == "agsparse" ? "dense" : "agsparse";
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        auto scheme = Make();
        auto different = AllSchemes().Create(other);
        const bool me = comm.rank() == odd;
        const std::vector<SparseTensor> in = Inputs(kRows, kWidth, 3);
        const std::vector<SparseTensor> taller = Inputs(kRows + 1, kWidth, 3);
        const std::vector<SparseTensor> wider = Inputs(kRows, kWidth + 1, 3);
        const size_t r = static_cast<size_t>(comm.rank());
        const uint64_t sent_before = comm.counters().total_sent();
        Record(0, comm.rank(), Capture([&] { scheme->Sync(comm, me ? taller[r] : in[r]); }));
        Record(1, comm.rank(), Capture([&] { scheme->Sync(comm, me ? wider[r] : in[r]); }));
        Record(2, comm.rank(), Capture([&] { (me ? *different : *scheme).Sync(comm, in[r]); }));
        Record(3, comm.rank(), Capture([&] {
                 if (me) {
                   WireMeta m;
                   m.rows = kRows;
                   m.width = kWidth;
                   m.flags = 2;  // e.g. bfloat16
                   m.scheme = Fnv1a(scheme->name());
                   m.key = Fnv1a("emb");
                   m.call = comm.NextTag();
                   SendRawMeta(comm, m);
                   throw MismatchError(Where{comm.rank(), "emb"}, "rank 2 claimed dtype 2");
                 }
                 scheme->Sync(comm, in[r]);
               }));
        Record(4, comm.rank(), Capture([&] {
                 if (me) {
                   WireMeta m;
                   m.magic = 0xdeadbeef;
                   m.call = comm.NextTag();
                   SendRawMeta(comm, m);
                   throw FormatError(Where{comm.rank(), "emb"}, "rank 2 sent garbage");
                 }
                 scheme->Sync(comm, in[r]);
               }));
        // Only the metadata moved: 56 bytes to each peer per sub-case.
        {
          std::lock_guard lock(mu_);
          EXPECT_EQ(comm.counters().total_sent() - sent_before, 5u * (kWorld - 1) * 56u)
              << "rank " << comm.rank() << ": data moved although ranks disagreed";
        }
        ExpectGoodCall(comm, *scheme);
      },
      kTimeout);
  ExpectEverywhere(0, "MismatchError", odd, {}, "rows");
  ExpectEverywhere(1, "MismatchError", odd, {}, "width");
  ExpectEverywhere(2, "MismatchError", odd, {}, "scheme");
  for (int r = 0; r < kWorld; ++r) {
    if (r == odd) continue;
    EXPECT_TRUE(Has(outcomes_[0][static_cast<size_t>(r)].what, "rows 2001 vs 2000"))
        << outcomes_[0][static_cast<size_t>(r)].what;
    EXPECT_TRUE(Has(outcomes_[1][static_cast<size_t>(r)].what, "width 5 vs 4"))
        << outcomes_[1][static_cast<size_t>(r)].what;
    EXPECT_TRUE(Has(outcomes_[2][static_cast<size_t>(r)].what, "a different scheme"))
        << outcomes_[2][static_cast<size_t>(r)].what;
    EXPECT_EQ(outcomes_[3][static_cast<size_t>(r)].kind, "MismatchError");
    EXPECT_TRUE(Has(outcomes_[3][static_cast<size_t>(r)].what, "a different dtype"))
        << outcomes_[3][static_cast<size_t>(r)].what;
    EXPECT_EQ(outcomes_[4][static_cast<size_t>(r)].kind, "MismatchError");
    EXPECT_TRUE(Has(outcomes_[4][static_cast<size_t>(r)].what, "corrupt metadata"))
        << outcomes_[4][static_cast<size_t>(r)].what;
  }
  // The odd rank sees the others' values too, e.g. "rows 2000 vs 2001".
  EXPECT_TRUE(Has(outcomes_[0][odd].what, "rows 2000 vs 2001")) << outcomes_[0][odd].what;
}

// A rank that made one collective call more than the others: its call number
// is ahead, every rank raises MismatchError, and (since the numbers stay
// apart) so does every later call, promptly: no hang, no mixed-up data.
TEST_P(AllSchemesOverGloo, CallOrderDriftFailsEveryRankOnEveryCall) {
  const int odd = 0;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        auto scheme = Make();
        const std::vector<SparseTensor> in = Inputs(kRows, kWidth, 4);
        if (comm.rank() == odd) comm.NextTag();  // a collective the others skipped
        for (size_t c = 0; c < 2; ++c) {
          Record(c, comm.rank(),
                 Capture([&] { scheme->Sync(comm, in[static_cast<size_t>(comm.rank())]); }));
        }
      },
      kTimeout);
  for (size_t c = 0; c < 2; ++c) {
    ExpectEverywhere(c, "MismatchError", odd, {"call number"}, "call order");
  }
}

// A real drift, not a faked tag: rank 0 makes one extra call of the same
// shape (another tensor), so its calls would pair with the peers' next ones.
// Before the call identity was in the metadata, every call here "succeeded"
// with the sum of different calls' tensors. Now every rank raises
// MismatchError on the extra call and on every later one; no sum comes back.
TEST_P(AllSchemesOverGloo, ExtraCallOnOneRankNeverReturnsAWrongSum) {
  const int odd = 0;
  testing::RunRanks(
      Backend::kGlooTcp, kWorld,
      [&](Communicator& comm) {
        auto scheme = Make();
        const std::vector<SparseTensor> in = Inputs(kRows, kWidth, 5);
        const size_t r = static_cast<size_t>(comm.rank());
        size_t c = 0;
        if (comm.rank() == odd) {
          SparseTensor extra = in[r];
          extra.set_name("extra");
          Record(c, comm.rank(), Capture([&] { scheme->Sync(comm, extra); }));
        }
        for (int call = 0; call < 3; ++call) {
          Record(comm.rank() == odd ? ++c : c++, comm.rank(), Capture([&] {
                   std::vector<float> buffer = in[r].ToDense();
                   if (call == 1) {
                     scheme->SyncDense(comm, buffer, kRows, kWidth, "emb");
                   } else {
                     scheme->Sync(comm, in[r]);
                   }
                 }));
        }
      },
      kTimeout);
  // Call 0 of every rank: the extra call of rank 0 met the peers' 'emb'.
  for (int r = 0; r < kWorld; ++r) {
    const Outcome& o = outcomes_[0][static_cast<size_t>(r)];
    EXPECT_EQ(o.kind, "MismatchError") << "rank " << r << ": " << o.what;
    EXPECT_TRUE(Has(o.what, "rank " + std::to_string(r) + ", tensor '" +
                                (r == odd ? "extra" : "emb") + "'"))
        << o.what;
    EXPECT_TRUE(Has(o.what, "another identity")) << o.what;
    EXPECT_TRUE(Has(o.what, "rank " + std::to_string(r == odd ? 1 : odd))) << o.what;
  }
  // Every later call of every rank raises too (rank 0 has one call more,
  // recorded at index 3).
  for (size_t c = 1; c < 4; ++c) {
    for (int r = 0; r < kWorld; ++r) {
      if (c == 3 && r != odd) continue;
      const Outcome& o = outcomes_[c][static_cast<size_t>(r)];
      EXPECT_EQ(o.kind, "MismatchError") << "call " << c << ", rank " << r << ": " << o.what;
      EXPECT_TRUE(Has(o.what, "out of step")) << o.what;
    }
  }
}

// NaN and Inf are summed like a dense sum would: x + NaN = NaN,
// Inf + (-Inf) = NaN, Inf + x = Inf; a row of NaNs is present, not zero.
std::vector<SparseTensor> PoisonedInputs(int64_t width) {
  std::vector<SparseTensor> clean = Inputs(kRows, width, 11);
  const size_t w = static_cast<size_t>(width);
  // (rank, row, first value, fill for the rest of the row)
  struct Poison {
    int rank;
    int64_t row;
    float first, rest;
  };
  const std::vector<Poison> poison = {
      {0, 17, kNaN, 1.0f},    {1, 17, 2.0f, 2.0f},     // NaN + finite
      {1, 1500, kInf, 0.0f},  {2, 1500, -kInf, 0.0f},  // Inf - Inf = NaN
      {2, 1999, kNaN, kNaN},                           // a row of NaNs only on one rank
      {0, 1234, kInf, -kInf},                          // infinities alone
      {1, 0, 0.0f, kNaN},                              // NaN after a zero
  };
  std::vector<SparseTensor> out;
  for (int r = 0; r < kWorld; ++r) {
    const SparseTensor& t = clean[static_cast<size_t>(r)];
    std::vector<int64_t> ids(t.ids().begin(), t.ids().end());
    std::vector<float> values(t.values().begin(), t.values().end());
    for (const Poison& p : poison) {
      if (p.rank != r) continue;
      ids.push_back(p.row);
      values.push_back(p.first);
      for (size_t j = 1; j < w; ++j) values.push_back(p.rest);
    }
    out.push_back(SparseTensor::FromCoo(kRows, width, std::move(ids), std::move(values),
                                        Duplicates::kSum, "emb"));
  }
  return out;
}

TEST_P(AllSchemesOverGloo, NaNAndInfPropagateLikeADenseSum) {
  for (int64_t width : {int64_t{1}, int64_t{4}}) {
    const std::vector<SparseTensor> in = PoisonedInputs(width);
    const DenseReference reference(in);
    testing::RunRanks(
        Backend::kGlooTcp, kWorld,
        [&](Communicator& comm) {
          auto scheme = Make();
          const SparseTensor& mine = in[static_cast<size_t>(comm.rank())];
          for (int call = 0; call < 2; ++call) {  // auto decides on call 0, then reuses
            const SparseTensor sum = scheme->Sync(comm, mine);
            std::vector<float> buffer = mine.ToDense();
            scheme->SyncDense(comm, buffer, kRows, width, "emb");
            const Agreement a = reference.Compare(sum);
            const Agreement d = reference.CompareDense(buffer);
            const std::vector<float> dense = sum.ToDense();
            std::lock_guard lock(mu_);
            EXPECT_LE(a.max_rel_error, 1e-5) << "width " << width << " rank " << comm.rank();
            EXPECT_EQ(a.rows_mismatch, 0) << "width " << width << " rank " << comm.rank();
            EXPECT_LE(d.max_rel_error, 1e-5) << "dense, width " << width << " rank " << comm.rank();
            EXPECT_EQ(d.rows_mismatch, 0) << "dense, width " << width << " rank " << comm.rank();
            const size_t w = static_cast<size_t>(width);
            EXPECT_TRUE(std::isnan(dense[17 * w])) << "rank " << comm.rank();
            EXPECT_TRUE(std::isnan(dense[1500 * w])) << "rank " << comm.rank();
            EXPECT_TRUE(std::isnan(dense[1999 * w]) && std::isnan(buffer[1999 * w]))
                << "the all-NaN row was dropped on rank " << comm.rank();
            EXPECT_EQ(dense[1234 * w], kInf) << "rank " << comm.rank();
          }
        },
        kTimeout);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, AllSchemesOverGloo, ::testing::ValuesIn(AllSchemes().ids()),
                         [](const auto& info) { return info.param; });

// Ranks whose scheme objects were built with different settings that change
// what goes on the wire or how it is read (Scheme::shared_settings): every
// rank raises MismatchError naming its own settings before any data moves,
// and the next call with shared settings is exact. Before, a rank that owned
// rows by ranges while its peers hashed them could sum rows each rank read
// as other rows (or wait out the timeout), and mixed wire values failed
// mid-exchange with FormatErrors.
TEST(SharedSettings, RanksBuiltWithOtherSettingsFailEveryRankBeforeDataMoves) {
  struct Case {
    std::string label, scheme, expect;     // expect: in the odd rank's message
    std::function<std::unique_ptr<Scheme>(bool odd)> make;
    WireValues odd_values = WireValues::kFloat32;  // the odd rank's call option
  };
  const std::vector<Case> cases = {
      {"zen ownership", "zen", "ownership range",
       [](bool odd) {
         ZenConfig c;
         if (odd) c.ownership = ZenOwnership::kRange;
         return std::make_unique<ZenScheme>(SchemeOptions{}, c);
       }},
      {"zen wire values", "zen", "wire values bfloat16",
       [](bool) { return AllSchemes().Create("zen"); }, WireValues::kBfloat16},
      {"omnireduce block", "omnireduce", "block_values 64",
       [](bool odd) {
         SchemeOptions o;
         if (odd) o.block_values = 64;
         return AllSchemes().Create("omnireduce", o);
       }},
      {"auto network", "auto", "network 1250000 B/s",
       [](bool odd) {
         AutoOptions a;
         if (odd) a.network.bandwidth_bytes_per_s = 1.25e6;
         return AllSchemes(a).Create("auto");
       }},
  };
  const int odd = 1;
  for (const Case& c : cases) {
    std::mutex mu;
    std::vector<Outcome> got(kWorld);
    testing::RunRanks(
        Backend::kGlooTcp, kWorld,
        [&](Communicator& comm) {
          const size_t r = static_cast<size_t>(comm.rank());
          const std::vector<SparseTensor> in = Inputs(kRows, kWidth, 5);
          const std::unique_ptr<Scheme> mine = c.make(comm.rank() == odd);
          const uint64_t sent_before = comm.counters().total_sent();
          SyncOptions call;
          if (comm.rank() == odd) call.values = c.odd_values;
          Outcome o = Capture([&] { mine->Sync(comm, in[r], call); });
          const uint64_t sent = comm.counters().total_sent() - sent_before;
          // The next call, every rank with the same (default) settings.
          const std::unique_ptr<Scheme> shared = c.make(false);
          const SparseTensor sum = shared->Sync(comm, in[r]);
          const Agreement a = DenseReference(in).Compare(sum);
          std::lock_guard lock(mu);
          EXPECT_EQ(sent, (kWorld - 1) * 56u)
              << c.label << ", rank " << r << ": data moved although the settings differ";
          EXPECT_LE(a.max_rel_error, 1e-5) << c.label << ", rank " << r;
          EXPECT_EQ(a.rows_mismatch, 0) << c.label << ", rank " << r;
          got[r] = std::move(o);
        },
        kTimeout);
    for (int r = 0; r < kWorld; ++r) {
      const Outcome& o = got[static_cast<size_t>(r)];
      EXPECT_EQ(o.kind, "MismatchError") << c.label << ", rank " << r << ": " << o.what;
      EXPECT_TRUE(Has(o.what, "rank " + std::to_string(r) + ", tensor 'emb'")) << o.what;
      EXPECT_TRUE(Has(o.what, "ranks disagree before '" + c.scheme + "'")) << o.what;
      EXPECT_TRUE(Has(o.what, "other settings of the scheme")) << o.what;
      EXPECT_TRUE(Has(o.what, "this rank's settings: ")) << o.what;
      EXPECT_EQ(Has(o.what, c.expect), r == odd) << c.label << ": " << o.what;
      EXPECT_EQ(Has(o.what, "this rank's settings: the defaults"), r != odd)
          << c.label << ": " << o.what;
    }
    std::printf("[%s] rank %d: %s\n", c.label.c_str(), odd, got[odd].what.c_str());
  }
}

// ---- Overflow crashes and lost rows (issue 13, item 2) in real processes
// over real Gloo TCP: two forked ranks, each with its own process and a file
// rendezvous, run
//   1. SyncDense of rows 2^62 + 1 x width 4 with a 4-float buffer (the
//      wrapped rows x width): before, agsparse, sparcml, omnireduce,
//      sparse_ps and auto died of SIGSEGV in FromDense;
//   2. Sync of rows 2^63 - 1 x width 1 with ids {0, 2^62, 2^63 - 2}:
//      before, omnireduce's block arithmetic wrapped and rows were lost.
// Each rank must end with a zen error naming its rank and the tensor (1; 2
// for schemes that densify), or the exact sum (2, sparse schemes), and
// exit normally; the parent measures the time to error.

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// What a forked rank reports, one line in its result file:
// "<ok|error|escaped> <ms> <message>".
std::string RunRank(int rank, const std::string& scheme, const std::string& store, int which) {
  const auto start = Clock::now();
  const auto ms = [&] {
    return std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  };
  try {
    GlooOptions o;
    o.rendezvous = "file:" + store;
    o.prefix = "overflow";
    o.timeout = std::chrono::milliseconds(10000);
    auto comm = ConnectGloo(rank, 2, o);
    auto s = AllSchemes().Create(scheme);
    if (which == 1) {
      std::vector<float> buffer = {1, 0, 0, 2};
      s->SyncDense(*comm, buffer, (int64_t{1} << 62) + 1, 4, "bucket0");
      return "ok " + ms() + " accepted a 4-float buffer for rows 2^62 + 1 x width 4";
    }
    const std::vector<SparseTensor> inputs = {
        SparseTensor::FromCoo(kMax, 1, {0, int64_t{1} << 62}, {1, 2}, Duplicates::kReject, "emb"),
        SparseTensor::FromCoo(kMax, 1, {int64_t{1} << 62, kMax - 1}, {3, 4}, Duplicates::kReject,
                              "emb")};
    const SparseTensor sum = s->Sync(*comm, inputs[static_cast<size_t>(rank)]);
    const Agreement a = DenseReference(inputs).Compare(sum);
    return "ok " + ms() + " rows_mismatch=" + std::to_string(a.rows_mismatch) +
           " max_rel_error=" + std::to_string(a.max_rel_error);
  } catch (const Error& e) {
    return "error " + ms() + " " + e.what();
  } catch (const std::exception& e) {
    return "escaped " + ms() + " " + e.what();
  }
}

struct RankResult {
  int status = 0;  // waitpid status
  std::string line;
};

std::vector<RankResult> RunTwoProcesses(const std::string& scheme, int which) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       ("zen_overflow_" + std::to_string(::getpid()) + "_" + scheme + "_" +
                        std::to_string(which));
  fs::remove_all(dir);
  fs::create_directories(dir / "store");
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string line = RunRank(r, scheme, (dir / "store").string(), which);
      std::ofstream(dir / ("rank" + std::to_string(r))) << line;
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  std::vector<RankResult> out(2);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < 2; ++r) {
    int status = 0;
    while (::waitpid(pids[static_cast<size_t>(r)], &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pids[static_cast<size_t>(r)], SIGKILL);
        ::waitpid(pids[static_cast<size_t>(r)], &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    out[static_cast<size_t>(r)].status = status;
    std::ifstream in(dir / ("rank" + std::to_string(r)));
    std::getline(in, out[static_cast<size_t>(r)].line);
  }
  fs::remove_all(dir);
  return out;
}

class AllSchemesOverflowProcesses : public ::testing::TestWithParam<std::string> {};

TEST_P(AllSchemesOverflowProcesses, WrappingDenseBufferIsAZenErrorOnEveryRank) {
  const auto results = RunTwoProcesses(GetParam(), 1);
  for (int r = 0; r < 2; ++r) {
    const RankResult& res = results[static_cast<size_t>(r)];
    ASSERT_TRUE(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0)
        << "rank " << r << " died: status " << res.status
        << (WIFSIGNALED(res.status) ? " signal " + std::to_string(WTERMSIG(res.status)) : "");
    EXPECT_TRUE(res.line.rfind("error ", 0) == 0) << "rank " << r << ": " << res.line;
    EXPECT_TRUE(Has(res.line, "tensor 'bucket0'")) << res.line;
    EXPECT_TRUE(Has(res.line, "overflows")) << res.line;
    std::printf("[ measured ] %s rank %d: %s\n", GetParam().c_str(), r, res.line.c_str());
  }
}

TEST_P(AllSchemesOverflowProcesses, RowsNearInt64MaxAreSummedExactlyOrRefusedEverywhere) {
  // zen: its hash domains refuse rows >= 2^61 (issue 13 item 4 reworks them).
  const bool densifies = GetParam() == "dense" || GetParam() == "zen";
  const auto results = RunTwoProcesses(GetParam(), 2);
  for (int r = 0; r < 2; ++r) {
    const RankResult& res = results[static_cast<size_t>(r)];
    ASSERT_TRUE(WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0)
        << "rank " << r << " died: status " << res.status;
    std::printf("[ measured ] %s rank %d: %s\n", GetParam().c_str(), r, res.line.c_str());
    if (densifies) {
      EXPECT_TRUE(res.line.rfind("error ", 0) == 0) << res.line;
      if (GetParam() == "dense") {
        EXPECT_TRUE(Has(res.line, "rank " + std::to_string(r))) << res.line;
      }
      continue;
    }
    EXPECT_TRUE(Has(res.line, "rows_mismatch=0 max_rel_error=0.000000")) << res.line;
  }
}

INSTANTIATE_TEST_SUITE_P(All, AllSchemesOverflowProcesses, ::testing::ValuesIn(AllSchemes().ids()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zen
