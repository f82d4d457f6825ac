// zen/schemes/zen/cost.cc — ZEN's cost function (registry.h): bytes per rank
// and rounds of one zen call.
#include "zen/schemes/zen/zen.h"

#include <algorithm>
#include <cmath>

namespace zen {

namespace {

// Elias-Fano's index bytes for `count` rows of a domain of `domain`
// positions (row_codec.h): L = floor(log2(domain / count)) low bits per
// row, count + domain / 2^L + 1 high bits.
double EliasFanoIndexBytes(double domain, double count) {
  if (count < 1) return 8;
  const double l = std::floor(std::log2(std::max(1.0, domain / count)));
  return (count * (l + 1) + std::floor(domain / std::exp2(l)) + 1) / 8;
}

}  // namespace

// Push COO of the rows h0 maps to each server (balanced: nnz / n per
// server; element-sparse rows, width 1, with the smallest index: 4-byte
// positions, COO32, Elias-Fano or the bitmap), pull each server's summed share U / n
// as values plus the smallest index: a hash bitmap over its domain (|D_s| ~
// rows / n bits, in uint64 words), COO positions (4 bytes each in domains
// of at most 2^32 positions, else 8) or Elias-Fano. One AllToAllV and one
// AllGatherV.
CostVolumes ZenCost(const CostInputs& in) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const double share = in.Union(in.n) / in.n;
  const double domain = static_cast<double>(in.rows) / in.n;
  const bool coo32 = domain <= static_cast<double>(kMaxCoo32Domain);
  const double bitmap = std::ceil(domain / 64) * 8;
  const double ids =
      std::min({bitmap, share * (coo32 ? 4 : 8), EliasFanoIndexBytes(domain, share)});
  const double pushed = in.nnz / in.n;  // to each server
  const double push_row =
      in.width == 1 && coo32
          ? in.vals + std::min({4.0, EliasFanoIndexBytes(domain, pushed) / std::max(1.0, pushed),
                                bitmap / std::max(1.0, pushed)})
          : in.row;
  const double push = (in.n - 1) * in.nnz / in.n * push_row;
  double pull = (in.n - 1) * (ids + share * in.vals);
  if (in.width > 1) {
    // Wide rows: the grouped pull (where it pays, as GroupsPay) leaves out
    // each rank's sole rows, about Union(n) - Union(n-1) (what the last
    // rank adds to the union), (n-1)/n of them in other servers' domains,
    // and adds n - 1 headers and their padding to each peer's window.
    const double sole = std::max(0.0, in.Union(in.n) - in.Union(in.n - 1));
    if (sole / in.n * in.vals > in.n * (kRowHeaderBytes + 8.0)) {
      pull -= sole * (in.n - 1) / in.n * in.vals;
      pull += (in.n - 1.0) * (in.n - 1.0) * (kRowHeaderBytes + 4.0);
    }
  }
  for (int r = 0; r < in.n; ++r) {
    v.recv[static_cast<size_t>(r)] += push + pull;
    v.sent[static_cast<size_t>(r)] += push + pull;
  }
  v.rounds += 2;
  return v;
}

}  // namespace zen
