// Prints data/row_permutation_table.json: values of zen::RowPermutation and
// zen::RowOwner::Permuted for test_process_group.py, which checks the torch
// port (zen/process_group.py) against them.
// Build (from the repository root, after the C++ build):
//   g++ -std=c++20 -O1 -I. -Ibuild/include python/tests/data/row_permutation_table.cc \
//       build/libzen_core.a -lpthread -o /tmp/row_permutation_table
//   /tmp/row_permutation_table > python/tests/data/row_permutation_table.json
#include <cstdint>
#include <cstdio>
#include <vector>

#include "zen/core/row_owner.h"
#include "zen/core/row_permutation.h"

namespace {

std::vector<int64_t> Ids(int64_t rows) {
  std::vector<int64_t> ids = {0, rows - 1, rows / 2, rows / 3};
  uint64_t x = 12345;
  for (int i = 0; i < 12; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.push_back(static_cast<int64_t>((x >> 1) % static_cast<uint64_t>(rows)));
  }
  return ids;
}

void PrintIds(const std::vector<int64_t>& v) {
  std::printf("[");
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%lld", i ? ", " : "", (long long)v[i]);
  std::printf("]");
}

}  // namespace

int main() {
  const uint64_t seeds[] = {0x5eed2e7ULL, 1, 0xFFFFFFFFFFFFFFFFULL};
  const int64_t rows_list[] = {1, 2, 3, 5, 1000, 1024, 1025, 714120, (int64_t{1} << 31) + 5,
                               int64_t{1} << 40, (int64_t{1} << 62) - 7, int64_t{1} << 62};
  std::printf("{\"permutation\": [\n");
  bool first = true;
  for (uint64_t seed : seeds) {
    for (int64_t rows : rows_list) {
      zen::RowPermutation pi(seed, rows);
      std::vector<int64_t> ids = Ids(rows), out;
      for (int64_t id : ids) out.push_back(pi(id));
      std::printf("%s  {\"seed\": %llu, \"rows\": %lld, \"ids\": ", first ? "" : ",\n",
                  (unsigned long long)seed, (long long)rows);
      PrintIds(ids);
      std::printf(", \"pi\": ");
      PrintIds(out);
      std::printf("}");
      first = false;
    }
  }
  std::printf("\n], \"owner\": [\n");
  first = true;
  struct Case { int64_t rows; int servers; int block_bits; };
  const Case cases[] = {{1000, 3, 0}, {32000, 8, 0}, {16384, 8, 0}, {300000, 4, 3},
                        {(int64_t{1} << 33) + 3, 4, 8}, {(int64_t{1} << 40) + 77, 7, 0},
                        {(int64_t{1} << 62), 8, 8}, {(int64_t{1} << 62), 3, 0}};
  for (const Case& c : cases) {
    const auto owner = zen::RowOwner::Permuted(0x5eed2e7ULL, c.rows, c.servers, c.block_bits);
    std::vector<int64_t> ids = Ids(c.rows);
    std::printf("%s  {\"seed\": %llu, \"rows\": %lld, \"servers\": %d, \"block_bits\": %d, "
                "\"ids\": ", first ? "" : ",\n", 0x5eed2e7ULL, (long long)c.rows, c.servers,
                c.block_bits);
    PrintIds(ids);
    std::printf(", \"places\": [");
    for (size_t i = 0; i < ids.size(); ++i) {
      const zen::RowPlace p = owner.Locate(ids[i]);
      std::printf("%s[%d, %lld]", i ? ", " : "", p.server, (long long)p.position);
    }
    std::printf("]}");
    first = false;
  }
  std::printf("\n]}\n");
  return 0;
}
