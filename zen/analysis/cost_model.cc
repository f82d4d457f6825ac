#include "zen/analysis/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "zen/comm/peer_pattern.h"
#include "zen/core/error.h"
#include "zen/schemes/omnireduce.h"
#include "zen/schemes/sparcml.h"

namespace zen {
namespace {


// Everything the formulas use, with unknown inputs filled in.
struct Inputs {
  int n = 1;
  int64_t rows = 1, width = 1;
  double row = 12;  // COO bytes of one row: index + width values
  double vals = 4;  // value bytes of one row
  double nnz = 0;   // mean rows per rank
  std::vector<double> gamma;
  std::vector<double> row_share, union_row_share;
  int64_t block_values = 256;
  double blocks = 1;  // number of blocks
  double db = 0;      // per-rank non-zero blocks (count)
  double ub = 0;      // union of n ranks' non-zero blocks (count)
  double record = 0;  // mean bytes of one block record
  std::vector<double> block_share, union_block_share;
  double meta = 0;  // agreement bytes per peer

  // Union rows of k ranks (k >= 1), capped at rows.
  double Union(int k) const {
    return std::min(static_cast<double>(rows), gamma[static_cast<size_t>(k - 1)] * nnz);
  }
};

// Shares of n ranges when only the skewness is known: the first range
// carries skewness x its size, the others split the rest by size.
std::vector<double> SharesFromSkew(double skewness, int64_t total, int n) {
  std::vector<double> share(static_cast<size_t>(n), 0);
  if (total <= 0) return share;
  const double first = static_cast<double>(BalancedChunk(total, n, 0).size());
  share[0] = std::min(1.0, skewness * first / static_cast<double>(total));
  const double rest = static_cast<double>(total) - first;
  for (int o = 1; o < n; ++o) {
    share[static_cast<size_t>(o)] =
        rest > 0 ? (1 - share[0]) * static_cast<double>(BalancedChunk(total, n, o).size()) / rest
                 : 0;
  }
  return share;
}

// Mean bytes of a block record (index + mask + values); masks repeat with
// the row/block alignment, so a prefix of blocks gives the mean.
double MeanRecordBytes(int64_t rows, int64_t width, int64_t block_values) {
  const int64_t nb = OmniBlockCount(rows, width, block_values);
  const int64_t probe = std::min<int64_t>(nb, 4096);
  double sum = 0;
  for (int64_t b = 0; b < probe; ++b)
    sum += static_cast<double>(OmniBlockRecordBytes(b, rows, width, block_values));
  return sum / static_cast<double>(probe);
}

void Validate(const WorkloadProfile& p) {
  const SparsityProfile& s = p.sparsity;
  if (s.world_size < 1 || s.rows < 1 || s.width < 1) {
    throw InvalidArgument(Where{}, "cost model: profile has world_size ", s.world_size, ", rows ",
                          s.rows, ", width ", s.width, "; all must be >= 1");
  }
  if (!(s.density >= 0 && s.density <= 1)) {
    throw InvalidArgument(Where{}, "cost model: density ", s.density, " is outside [0, 1]");
  }
  if (s.gamma.size() < static_cast<size_t>(s.world_size)) {
    throw InvalidArgument(Where{}, "cost model: gamma has ", s.gamma.size(),
                          " entries, world size is ", s.world_size);
  }
  if (p.block_values < 1)
    throw InvalidArgument(Where{}, "cost model: block_values ", p.block_values, " < 1");
}

Inputs Derive(const WorkloadProfile& p) {
  Validate(p);
  const SparsityProfile& s = p.sparsity;
  Inputs in;
  in.n = s.world_size;
  in.rows = s.rows;
  in.width = s.width;
  in.vals = static_cast<double>(s.value_bytes) * static_cast<double>(s.width);
  in.row = static_cast<double>(s.index_bytes) + in.vals;
  in.nnz = s.density * static_cast<double>(s.rows);
  in.gamma.assign(s.gamma.begin(), s.gamma.begin() + s.world_size);
  const size_t n = static_cast<size_t>(in.n);
  in.row_share = p.row_share.size() == n ? p.row_share : SharesFromSkew(s.skewness, s.rows, in.n);
  in.union_row_share = p.union_row_share.size() == n ? p.union_row_share : in.row_share;

  in.block_values = p.block_values;
  const int64_t nb = OmniBlockCount(s.rows, s.width, p.block_values);
  in.blocks = static_cast<double>(nb);
  in.record = MeanRecordBytes(s.rows, s.width, p.block_values);
  // Random placement when not measured: a block of g rows is non-zero with
  // probability 1 - (1 - d)^g; a row wider than a block fills its blocks.
  const double g = static_cast<double>(p.block_values) / static_cast<double>(s.width);
  const auto fill = [&](double d) { return g >= 1 ? 1 - std::pow(1 - d, g) : d; };
  const double db = p.block_density >= 0 ? p.block_density : fill(s.density);
  in.db = db * in.blocks;
  const double union_d = in.Union(in.n) / static_cast<double>(s.rows);
  in.ub = p.block_gamma_n >= 0 ? std::min(in.blocks, p.block_gamma_n * in.db)
                               : fill(union_d) * in.blocks;
  in.block_share = p.block_share.size() == n ? p.block_share : SharesFromSkew(s.skewness, nb, in.n);
  in.union_block_share = p.union_block_share.size() == n ? p.union_block_share : in.block_share;
  in.meta = p.count_agreement ? kAgreementBytes : 0;
  return in;
}

// Per-rank bytes of one scheme, and how time is formed from them.
struct Volumes {
  std::vector<double> recv, sent;
  int rounds = 0;
  // Staged schemes: the largest message of each stage, summed for time, on
  // top of the metadata exchange (base).
  std::vector<double> stage_max;
  double base = 0;
};

Volumes NewVolumes(const Inputs& in) {
  Volumes v;
  const double meta = in.meta * (in.n - 1);
  v.recv.assign(static_cast<size_t>(in.n), meta);
  v.sent.assign(static_cast<size_t>(in.n), meta);
  v.rounds = in.meta > 0 && in.n > 1 ? 1 : 0;
  v.base = meta;
  return v;
}

// dense: ring reduce-scatter + ring allgather of the values, then the same
// of the presence bitmap (uint64 words). Rank r receives every chunk but its
// own in each phase: reduce-scatter misses chunk r, allgather chunk r + 1.
Volumes Dense(const Inputs& in) {
  Volumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const int64_t values = in.rows * in.width;
  const int64_t words = in.rows / 64 + (in.rows % 64 != 0 ? 1 : 0);  // (rows + 63) wraps near 2^63
  const double total = static_cast<double>(values) * 4 + static_cast<double>(words) * 8;
  double biggest = 0;
  for (int r = 0; r < in.n; ++r) {
    const auto chunk = [&](int c) {
      return static_cast<double>(BalancedChunk(values, in.n, c).size()) * 4 +
             static_cast<double>(BalancedChunk(words, in.n, c).size()) * 8;
    };
    const double bytes = 2 * total - chunk(r) - chunk((r + 1) % in.n);
    v.recv[static_cast<size_t>(r)] += bytes;
    v.sent[static_cast<size_t>(r)] += bytes;
    biggest = std::max(biggest, chunk(r));
  }
  v.rounds += 4 * (in.n - 1);
  v.stage_max.assign(static_cast<size_t>(2 * (in.n - 1)), biggest);
  return v;
}

// agsparse: AllGatherV of each rank's COO stream (one round; the sizes
// travel in the transport's frames, which the counters do not include).
Volumes AgSparse(const Inputs& in) {
  Volumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const double bytes = (in.n - 1) * in.nnz * in.row;
  for (int r = 0; r < in.n; ++r) {
    v.recv[static_cast<size_t>(r)] += bytes;
    v.sent[static_cast<size_t>(r)] += bytes;
  }
  v.rounds += 1;
  return v;
}

// sparcml: every stage a rank receives an 8-byte header plus the stream of
// its partner's group, whose size is the union of the group's ranks. The
// payload follows its header without waiting for the receiver, so a stage
// costs one latency.
Volumes Sparcml(const Inputs& in) {
  Volumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const auto stream = [&](int k) {
    return 8 +
           static_cast<double>(SparcmlStreamBytes(std::llround(in.Union(k)), in.rows, in.width));
  };
  std::vector<RecursiveDoublingPlan> plans;
  for (int r = 0; r < in.n; ++r) plans.push_back(RecursiveDoubling(r, in.n));
  const int p = plans[0].pow2;
  std::vector<int> group(static_cast<size_t>(in.n), 1);
  const auto add = [&](int to, int from, double bytes) {
    v.recv[static_cast<size_t>(to)] += bytes;
    v.sent[static_cast<size_t>(from)] += bytes;
  };
  if (p != in.n) {  // fold the extra ranks in
    for (int e = p; e < in.n; ++e) add(e - p, e, stream(1));
    for (int e = p; e < in.n; ++e) group[static_cast<size_t>(e - p)] = 2;
    v.stage_max.push_back(stream(1));
    v.rounds += 1;
  }
  for (size_t k = 0; k < plans[0].partners.size(); ++k) {
    std::vector<int> next = group;
    double biggest = 0;
    for (int r = 0; r < p; ++r) {
      const int q = plans[static_cast<size_t>(r)].partners[k];
      add(r, q, stream(group[static_cast<size_t>(q)]));
      biggest = std::max(biggest, stream(group[static_cast<size_t>(q)]));
      next[static_cast<size_t>(r)] = group[static_cast<size_t>(r)] + group[static_cast<size_t>(q)];
    }
    group = next;
    v.stage_max.push_back(biggest);
    v.rounds += 1;
  }
  if (p != in.n) {  // send the result back
    for (int e = p; e < in.n; ++e) add(e, e - p, stream(in.n));
    v.stage_max.push_back(stream(in.n));
    v.rounds += 1;
  }
  return v;
}

// Push to range owners and pull their summed range: the shape shared by
// sparse_ps (rows, COO) and omnireduce (blocks, records). `local` is one
// rank's item count, `unions` the union's, item the bytes of one item.
Volumes OwnerPushPull(const Inputs& in, double local, double unions, double item,
                      const std::vector<double>& share, const std::vector<double>& union_share) {
  Volumes v = NewVolumes(in);
  if (in.n == 1) return v;
  for (int r = 0; r < in.n; ++r) {
    const size_t o = static_cast<size_t>(r);
    const double push_in = (in.n - 1) * local * share[o] * item;
    const double push_out = local * (1 - share[o]) * item;
    const double pull_in = unions * (1 - union_share[o]) * item;
    const double pull_out = (in.n - 1) * unions * union_share[o] * item;
    v.recv[o] += push_in + pull_in;
    v.sent[o] += push_out + pull_out;
  }
  v.rounds += 2;  // one AllToAllV, one AllGatherV
  return v;
}

Volumes SparsePs(const Inputs& in) {
  return OwnerPushPull(in, in.nnz, in.Union(in.n), in.row, in.row_share, in.union_row_share);
}

Volumes OmniReduce(const Inputs& in) {
  return OwnerPushPull(in, in.db, in.ub, in.record, in.block_share, in.union_block_share);
}

// zen (design): push COO of the rows h0 maps to each server (balanced: nnz / n
// per server), pull each server's summed share U / n as values plus either a
// hash bitmap over its domain (|D_s| ~ rows / n bits, in uint64 words) or
// COO ids, whichever is smaller. One AllToAllV and one AllGatherV.
Volumes Zen(const Inputs& in) {
  Volumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const double share = in.Union(in.n) / in.n;
  const double domain = static_cast<double>(in.rows) / in.n;
  const double ids = std::min(std::ceil(domain / 64) * 8, share * 8);
  const double push = (in.n - 1) * in.nnz / in.n * in.row;
  const double pull = (in.n - 1) * (ids + share * in.vals);
  for (int r = 0; r < in.n; ++r) {
    v.recv[static_cast<size_t>(r)] += push + pull;
    v.sent[static_cast<size_t>(r)] += push + pull;
  }
  v.rounds += 2;
  return v;
}

Prediction Finish(std::string_view scheme, const Volumes& v, const Network& net) {
  Prediction p;
  p.scheme = std::string(scheme);
  p.recv_max = MaxOf(v.recv);
  p.recv_mean = MeanOf(v.recv);
  p.sent_max = MaxOf(v.sent);
  p.rounds = v.rounds;
  const double bottleneck =
      v.stage_max.empty() ? std::max(p.recv_max, p.sent_max)
                          : v.base + std::accumulate(v.stage_max.begin(), v.stage_max.end(), 0.0);
  p.time_s = v.rounds * net.latency_s + bottleneck / net.bandwidth_bytes_per_s;
  return p;
}

}  // namespace

std::vector<std::string> ModeledSchemes() {
  return {"dense", "agsparse", "sparcml", "omnireduce", "sparse_ps", "zen"};
}

std::optional<Prediction> Predict(std::string_view scheme, const WorkloadProfile& profile,
                                  const Network& network) {
  const Inputs in = Derive(profile);
  Volumes v;
  if (scheme == "dense")
    v = Dense(in);
  else if (scheme == "agsparse")
    v = AgSparse(in);
  else if (scheme == "sparcml")
    v = Sparcml(in);
  else if (scheme == "omnireduce")
    v = OmniReduce(in);
  else if (scheme == "sparse_ps")
    v = SparsePs(in);
  else if (scheme == "zen")
    v = Zen(in);
  else
    return std::nullopt;
  return Finish(scheme, v, network);
}

std::vector<Prediction> PredictAll(const WorkloadProfile& profile, const Network& network) {
  std::vector<Prediction> out;
  for (const std::string& s : ModeledSchemes()) out.push_back(*Predict(s, profile, network));
  return out;
}

double MaxOf(std::span<const double> v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double MeanOf(std::span<const double> v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace zen
