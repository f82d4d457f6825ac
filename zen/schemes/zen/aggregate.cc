// zen/schemes/zen/aggregate.cc — phase 3, aggregate: this server's
// partition summed straight out of the receive buffers into its pull
// message. The adding functions are templates on the value type T
// (instantiated for every type of ZEN_FOR_EACH_VALUE_TYPE) and add in AccumOf<T>.
#include "zen/schemes/zen/zen.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "zen/core/error.h"
#include "zen/schemes/zen/internal.h"

namespace zen {

using zen_internal::SlotClass;
using zen_internal::ClassSlot;

template <typename T>
int64_t ZenScheme::Aggregate(const HashDomains& domains, int server, int64_t width) {
  // This server's partition, summed straight out of the receive buffers.
  Workspace& ws = ws_;
  const PartitionsOf<T>& mine = ws.mine.Of<T>();
  const int n = domains.servers();
  const bool compact = CompactPush(width, domains.size(server));
  std::vector<RowsOf<T>>& parts = PartsOf<T>();
  parts.clear();
  ws.part_count = static_cast<size_t>(n);
  for (int i = 0; i < n; ++i) {
    if (i == server) {
      parts.push_back({mine.positions_of(server), mine.values_of(server)});
      continue;
    }
    const RowsMessage& m = ws.pushed[static_cast<size_t>(i)];
    // COO positions are int64 at an 8-byte aligned offset of the buffer
    // (compact ones are read by AggregateElements from the message).
    parts.push_back(
        {compact ? std::span<const int64_t>()
                 : std::span(reinterpret_cast<const int64_t*>(m.index),
                             static_cast<size_t>(m.count)),
         std::span(m.row<T>(0), static_cast<size_t>(m.count) * static_cast<size_t>(width))});
  }
  // The sum is written straight into the pull message. (Compact pushes are
  // float32's: CompactPush.)
  ws.group_starts.clear();
  int64_t served = 0;
  if (!call_.sum_order.empty()) {
    served = AggregateInSumOrder<T>(domains, server, width);
  } else if (compact) {
    if constexpr (std::is_same_v<T, float>) {
      served = AggregateElements(domains.size(server), server);
    }
  } else {
    served = AggregateRows<T>(domains.size(server), width, server);
  }
  if (ws.group_starts.empty()) {  // grouped: its indexes are written already
    WriteRowsIndex(domains.size(server), width, ws.served_positions, ws.pull_layout,
                   ws.pull_send);
  }
  stats_.served_rows = served;
  return served;
}

template <typename T>
int64_t ZenScheme::AggregateRows(int64_t domain_size, int64_t width, int server) {
  Workspace& ws = ws_;
  const std::span<const RowsOf<T>> parts = PartsOf<T>();
  size_t total = 0;
  for (const RowsOf<T>& part : parts) total += part.ids.size();
  if (domain_size <= (int64_t{1} << 32) && total < (size_t{1} << 32)) {
    return AggregateRowsSorted<T>(domain_size, width, total, server);
  }
  // A keys-only merge counts the union (which fixes the encoding and the
  // values' offset); the second merge writes the summed values where they
  // are sent from.
  const int64_t served = static_cast<int64_t>(MergedCount(parts, ws.merge));
  ws.pull_layout = LayoutRows(domain_size, served, width, config_.pull_encoding, sizeof(T));
  ws.pull_send.resize(ws.pull_layout.bytes);
  ws.served_positions.resize(static_cast<size_t>(served));
  MergeSumRowsInto(parts, width, ws.served_positions.data(),
                   reinterpret_cast<T*>(ws.pull_send.data() + ws.pull_layout.values_offset),
                   ws.merge);
  return served;
}

namespace {

// The incoming rows of a server, one word per row (its position above its
// index in `rows`), sorted by position: runs of equal positions summed in
// place, the first row copied and the others added in rank order (the
// sort is stable), bit for bit what the n-way merge gives. Values of T are
// added in AccumOf<T>: in place where that is T (float32, float64), else
// in an accumulator narrowed once per stored value.
template <typename T>
struct SortedRows {
  const uint64_t* words;
  const std::byte* const* rows;
  size_t total;
  int64_t width;

  // The rows are read in position order, i.e. at random: prefetched ahead.
  static constexpr size_t kAhead = 8;
  const T* Row(size_t i) const {
    if (i + kAhead < total) __builtin_prefetch(rows[static_cast<uint32_t>(words[i + kAhead])]);
    return reinterpret_cast<const T*>(rows[static_cast<uint32_t>(words[i])]);
  }

  // Sums each run of equal positions into place(served row index), then
  // done(served row index, the sum).
  template <typename Place, typename Done>
  void SumRuns(Place place, Done done) const {
    const size_t w = static_cast<size_t>(width);
    size_t s = 0;
    for (size_t i = 0; i < total; ++s) {
      const uint64_t p = words[i] >> 32;
      T* out = place(s);
      if constexpr (std::is_same_v<AccumOf<T>, T>) {
        CopyRow(out, Row(i), width);
        for (++i; i < total && (words[i] >> 32) == p; ++i) {
          const T* src = Row(i);
          for (size_t c = 0; c < w; ++c) out[c] += src[c];
        }
      } else {
        size_t end = i + 1;
        while (end < total && (words[end] >> 32) == p) ++end;
        SumWidened(out, i, end);
        i = end;
      }
      done(s, out);
    }
  }
  // Rows [first, end) summed in AccumOf<T>, a block of columns at a time,
  // and narrowed once into out.
  void SumWidened(T* out, size_t first, size_t end) const {
    constexpr size_t kBlock = 64;
    const size_t w = static_cast<size_t>(width);
    AccumOf<T> acc[kBlock];
    for (size_t c0 = 0; c0 < w; c0 += kBlock) {
      const size_t cols = std::min(kBlock, w - c0);
      for (size_t c = 0; c < cols; ++c) acc[c] = Widen(Row(first)[c0 + c]);
      for (size_t i = first + 1; i < end; ++i) {
        const T* src = Row(i) + c0;
        for (size_t c = 0; c < cols; ++c) acc[c] += Widen(src[c]);
      }
      for (size_t c = 0; c < cols; ++c) out[c0 + c] = Narrow<T>(acc[c]);
    }
  }
  // Into consecutive rows at `out`.
  void SumRunsInto(std::byte* out) const {
    const size_t w = static_cast<size_t>(width);
    T* first = reinterpret_cast<T*>(out);
    SumRuns([&](size_t s) { return first + s * w; }, [](size_t, T*) {});
  }
};

}  // namespace

template <typename T>
void ZenScheme::SortIncomingRows(int64_t domain_size, int64_t width, size_t total) {
  Workspace& ws = ws_;
  const std::span<const RowsOf<T>> parts = PartsOf<T>();
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(T);
  ws.words.resize(total);
  ws.agg_rows.resize(total);
  ws.agg_parts.resize(total);
  size_t k = 0;
  for (size_t q = 0; q < parts.size(); ++q) {
    const std::byte* v = reinterpret_cast<const std::byte*>(parts[q].values.data());
    for (const int64_t p : parts[q].ids) {
      ws.words[k] = static_cast<uint64_t>(p) << 32 | k;
      ws.agg_parts[k] = static_cast<uint32_t>(q);
      ws.agg_rows[k++] = v;
      v += row_bytes;
    }
  }
  SortWordsByBits(ws.words, ws.word_scratch, 32, KeyBits(domain_size));
}

template <typename T>
int64_t ZenScheme::AggregateRowsSorted(int64_t domain_size, int64_t width, size_t total,
                                       int server) {
  // One word per incoming row, its position above its index in agg_rows,
  // radix-sorted by position (stable: equal positions keep the parts' rank
  // order), then one pass counts the union and one sums each run of equal
  // positions into the pull message (SortedRows): a few streaming passes,
  // where a heap merge costs a few mispredicted branches per row.
  Workspace& ws = ws_;
  const size_t parts = ws.part_count;
  SortIncomingRows<T>(domain_size, width, total);
  const SortedRows<T> sorted{ws.words.data(), ws.agg_rows.data(), total, width};
  // A grouped pull travels as windows (an AllToAllV), which only wide rows
  // use (PostRounds): width 1 (float64's, the element path being float32's)
  // pulls one plain message.
  if (parts < 2 || width == 1 || !GroupsPay(SIZE_MAX, static_cast<int>(parts))) {
    sorted.SumRunsInto(LayoutServed(domain_size, width));
    return static_cast<int64_t>(ws.served_positions.size());
  }
  const size_t served = ClassifyServed(total, server);
  const size_t left_out_bytes = ws.left_out_rows * static_cast<size_t>(width) * sizeof(T);
  if (!GroupsPay(left_out_bytes, static_cast<int>(parts))) {
    sorted.SumRunsInto(LayoutServedPositions(domain_size, width));
    return static_cast<int64_t>(served);
  }
  const bool twice = call_.values == WireValues::kFloat32;
  const size_t end = LayoutGroupedPull(domain_size, width, twice);
  // Each class's next row (a pointer into its message's values).
  const size_t classes = parts + 1;
  ws.class_next.resize(classes);
  for (size_t c = 0; c < classes; ++c) {
    ws.class_next[c] = ws.pull_send.data() + ws.group_starts[ClassSlot(c, parts)] +
                       ws.class_layouts[c].values_offset;
  }
  const uint32_t* cls = ws.served_class.data();
  std::byte** next = ws.class_next.data();
  const size_t twin = end / sizeof(T);  // the second copy, in values (end is 8-aligned)
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(T);
  const uint32_t last_twinned = static_cast<uint32_t>(parts - 1);  // class of slot n-2
  sorted.SumRuns(
      [&](size_t s) {
        T* out = reinterpret_cast<T*>(next[cls[s]]);
        next[cls[s]] += row_bytes;
        return out;
      },
      [&](size_t s, T* out) {
        if (twice && cls[s] != 0 && cls[s] <= last_twinned) CopyRow(out + twin, out, width);
      });
  WriteGroupedIndexes(domain_size, width);
  if (twice) {
    // The second copy's headers and indexes (its values are in place).
    for (size_t m = 0; m + 1 < parts; ++m) {
      const size_t at = ws.group_starts[m];
      std::memcpy(ws.pull_send.data() + end + at, ws.pull_send.data() + at,
                  ws.class_layouts[SlotClass(m, parts)].values_offset);
    }
  } else {
    NarrowGroupedPull();
  }
  CopyGroupsForWindows(twice);
  return static_cast<int64_t>(served);
}

size_t ZenScheme::ClassifyServed(size_t total, int server) {
  // Each served row's class: shared (two or more contributors) or the sole
  // row of the rank whose part holds it.
  Workspace& ws = ws_;
  const size_t parts = ws.part_count;
  const uint64_t* words = ws.words.data();
  ws.served_positions.resize(total);  // at most one per word; cut below
  ws.served_class.resize(total);
  ws.class_rows.assign(parts + 1, 0);
  size_t served = 0;
  for (size_t i = 0; i < total; ++served) {
    const uint64_t p = words[i] >> 32;
    const size_t first = i;
    for (++i; i < total && (words[i] >> 32) == p; ++i) {
    }
    const uint32_t c = i - first == 1 ? 1 + ws.agg_parts[static_cast<uint32_t>(words[first])] : 0;
    ws.served_positions[served] = static_cast<int64_t>(p);
    ws.served_class[served] = c;
    ++ws.class_rows[c];
  }
  ws.served_positions.resize(served);
  ws.served_class.resize(served);
  ws.left_out_rows = 0;  // rows not sent back to their sole contributor
  for (size_t q = 0; q < parts; ++q) {
    if (q != static_cast<size_t>(server)) ws.left_out_rows += ws.class_rows[1 + q];
  }
  return served;
}

size_t ZenScheme::LayoutGroupedPull(int64_t domain_size, int64_t width, bool twice) {
  // Each class a message of its own, back to back, 8-byte aligned, the
  // padding zeroed: rank 0's sole rows, ..., rank n-1's, then the shared
  // rows (slot m holds class SlotClass(m)); then, for the windows
  // (CopyGroupsForWindows), slots 0..n-2 again. With float32 values
  // (`twice`) the second copy is written in the same pass as the first
  // (each sole row stored at its two places: no pass of its own);
  // half-width values are narrowed and packed first, then copied.
  Workspace& ws = ws_;
  const size_t parts = ws.part_count;
  const size_t classes = parts + 1;
  ws.class_layouts.resize(classes);
  for (size_t c = 0; c < classes; ++c) {
    ws.class_layouts[c] = LayoutRows(domain_size, static_cast<int64_t>(ws.class_rows[c]), width,
                                     config_.pull_encoding, ValueBytes());
  }
  ws.group_starts.resize(classes + 1);
  size_t end = 0;
  for (size_t m = 0; m < classes; ++m) {
    ws.group_starts[m] = end;
    end = RowsPadded(end + ws.class_layouts[SlotClass(m, parts)].bytes);
  }
  ws.group_starts[classes] = end;
  const size_t again = twice ? ws.group_starts[parts - 1] : 0;  // slots 0..n-2
  ws.pull_send.resize(end + again);
  for (size_t m = 0; m < classes; ++m) {
    const size_t used = ws.group_starts[m] + ws.class_layouts[SlotClass(m, parts)].bytes;
    for (const size_t copy : {size_t{0}, end}) {
      if (copy != 0 && (!twice || m + 1 >= parts)) continue;
      std::fill(ws.pull_send.begin() + static_cast<std::ptrdiff_t>(copy + used),
                ws.pull_send.begin() + static_cast<std::ptrdiff_t>(copy + ws.group_starts[m + 1]),
                std::byte{0});
    }
  }
  ws.pull_layout = ws.class_layouts[0];
  // The positions grouped by class (each group ascending), and where each
  // class's next row goes.
  const size_t served = ws.served_positions.size();
  ws.class_positions.resize(served);
  ws.class_slots.resize(classes);
  size_t first = 0;
  for (size_t c = 0; c < classes; ++c) {
    ws.class_slots[c] = first;
    first += ws.class_rows[c];
  }
  for (size_t s = 0; s < served; ++s) {
    ws.class_positions[ws.class_slots[ws.served_class[s]]++] = ws.served_positions[s];
  }
  return end;
}

std::byte* ZenScheme::LayoutServed(int64_t domain_size, int64_t width) {
  Workspace& ws = ws_;
  ws.served_positions.clear();
  for (const uint64_t x : ws.words) {
    const int64_t p = static_cast<int64_t>(x >> 32);
    if (ws.served_positions.empty() || ws.served_positions.back() != p) {
      ws.served_positions.push_back(p);
    }
  }
  return LayoutServedPositions(domain_size, width);
}

std::byte* ZenScheme::LayoutServedPositions(int64_t domain_size, int64_t width) {
  Workspace& ws = ws_;
  const auto served = static_cast<int64_t>(ws.served_positions.size());
  ws.pull_layout = LayoutRows(domain_size, served, width, config_.pull_encoding, ValueBytes());
  ws.pull_send.resize(ws.pull_layout.bytes);
  return ws.pull_send.data() + ws.pull_layout.values_offset;
}

template <typename T>
int64_t ZenScheme::AggregateInSumOrder(const HashDomains& domains, int server, int64_t width) {
  Workspace& ws = ws_;
  const int n = domains.servers();
  const size_t w = static_cast<size_t>(width);
  const std::span<const RowsOf<T>> parts = PartsOf<T>();
  const int64_t served = static_cast<int64_t>(MergedCount(parts, ws.merge));
  ws.pull_layout =
      LayoutRows(domains.size(server), served, width, config_.pull_encoding, sizeof(T));
  ws.pull_send.resize(ws.pull_layout.bytes);
  T* out = reinterpret_cast<T*>(ws.pull_send.data() + ws.pull_layout.values_offset);
  ws.served_positions.clear();
  contrib_.assign(static_cast<size_t>(n), nullptr);
  const RowOwner& owner = domains.owner();
  const int64_t start = domains.start(server);
  // Sums the row of `key` (its contributions in contrib_) into out.
  auto flush = [&](int64_t key) {
    const int64_t id = owner.IdOfKey(start + key);
    T* dst = out + ws.served_positions.size() * w;
    ws.served_positions.push_back(key);
    int64_t e = id * width;  // < rows x width: checked when the call was validated
    auto step = std::upper_bound(call_.sum_order.begin(), call_.sum_order.end(), e,
                                 [](int64_t v, const std::pair<int64_t, int>& s) {
                                   return v < s.first;
                                 });
    for (size_t k = 0; k < w; ++k, ++e) {
      while (step != call_.sum_order.end() && step->first <= e) ++step;
      const int first = step == call_.sum_order.begin() ? n - 1 : (step - 1)->second;
      // Each addition rounded to T (Add), as the ordered ring and Gloo's
      // sum of 16-bit values do; for float32 and float64 a plain +.
      T acc{};
      bool any = false;
      for (int j = 0, q = first; j < n; ++j, q = q == 0 ? n - 1 : q - 1) {
        const T* row = reinterpret_cast<const T*>(contrib_[static_cast<size_t>(q)]);
        if (row == nullptr) continue;
        acc = any ? Add(row[k], acc) : row[k];
        any = true;
      }
      dst[k] = acc;
    }
    std::fill(contrib_.begin(), contrib_.end(), nullptr);
  };
  bool pending = false;
  int64_t current = 0;
  ForEachMerged(parts, ws.merge, [&](int64_t key, size_t part, size_t i) {
    if (pending && key != current) flush(current);
    current = key;
    pending = true;
    contrib_[part] = reinterpret_cast<const std::byte*>(parts[part].values.data() + i * w);
  });
  if (pending) flush(current);
  return served;
}

int64_t ZenScheme::AggregateElements(int64_t domain_size, int server) {
  // Width 1, positions below 2^32: one word per incoming element, the
  // position above the value's bits, read from every part in rank order
  // (the peers' positions from their messages in place, any compact index:
  // RowsMessage::ForEach). Each part's positions ascend (the pushes' were
  // checked by ParseRows, this server's own come sorted from the
  // partitioner), so the parts' words of a range of 2^11 positions are a
  // run in each part: the ranges are taken in order, each summed in an
  // accumulator in cache (AggregateElementRanges). Domains too sparse for
  // it (more ranges x parts than 4 x the words) take a radix sort of the
  // words and one pass that sums runs of equal positions (stable: the
  // same order).
  Workspace& ws = ws_;
  const std::span<const RowsOf<float>> all = PartsOf<float>();
  const size_t parts = all.size();
  size_t total = 0;
  for (const RowsOf<float>& part : all) total += part.values.size();
  ws.words.resize(total);
  ws.part_ends.resize(parts);
  uint64_t* w = ws.words.data();
  for (size_t q = 0; q < parts; ++q) {
    const std::span<const float> values = all[q].values;
    auto word = [&](size_t i, uint64_t position) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof(bits));
      *w++ = position << 32 | bits;
    };
    if (static_cast<int>(q) == server) {
      const std::span<const int64_t> own = all[q].ids;
      for (size_t i = 0; i < values.size(); ++i) word(i, static_cast<uint64_t>(own[i]));
    } else {
      ws.pushed[q].ForEach([&](size_t i, int64_t p) { word(i, static_cast<uint64_t>(p)); });
    }
    ws.part_ends[q] = static_cast<size_t>(w - ws.words.data());
  }
  const uint64_t domain = static_cast<uint64_t>(std::max<int64_t>(domain_size, 1));
  const uint64_t ranges = (domain - 1) / kElementRange + 1;
  if (ranges * parts <= 4 * static_cast<uint64_t>(total)) {
    AggregateElementRanges(ranges, server);
    float* out = reinterpret_cast<float*>(LayoutServedPositions(domain_size, 1));
    std::copy(ws.served_sums.begin(), ws.served_sums.end(), out);
    return static_cast<int64_t>(ws.served_positions.size());
  }
  SortWordsByBits(ws.words, ws.word_scratch, 32, KeyBits(domain_size));
  float* out = reinterpret_cast<float*>(LayoutServed(domain_size, 1));
  size_t k = 0;
  for (size_t i = 0; i < total;) {
    const uint64_t p = ws.words[i] >> 32;
    float sum;
    uint32_t bits = static_cast<uint32_t>(ws.words[i]);
    std::memcpy(&sum, &bits, sizeof(sum));
    for (++i; i < total && (ws.words[i] >> 32) == p; ++i) {
      float v;
      bits = static_cast<uint32_t>(ws.words[i]);
      std::memcpy(&v, &bits, sizeof(v));
      sum += v;
    }
    out[k++] = sum;
  }
  return static_cast<int64_t>(ws.served_positions.size());
}

void ZenScheme::AggregateElementRanges(uint64_t ranges, int server) {
  // Each range of kElementRange positions summed in an accumulator in cache
  // (a position's first value assigned, later ones added in rank order: bit
  // for bit the n-way merge's sums) and read out in position order from a
  // bitmap of the positions seen. No sort, no scatter.
  Workspace& ws = ws_;
  const size_t parts = ws.part_count;
  ws.served_positions.clear();
  ws.served_sums.clear();
  ws.cursors.resize(parts);
  for (size_t q = 0; q < parts; ++q) ws.cursors[q] = q == 0 ? 0 : ws.part_ends[q - 1];
  float acc[kElementRange];                // a range's sums, valid where seen
  uint64_t seen[kElementRange / 64] = {};  // the range's positions seen
  const uint64_t* words = ws.words.data();
  for (uint64_t r = 0; r < ranges; ++r) {
    const uint64_t start = r * kElementRange;
    for (size_t q = 0; q < parts; ++q) {
      size_t i = ws.cursors[q];
      const size_t end = ws.part_ends[q];
      for (; i < end; ++i) {
        // A position below the range (positions that do not ascend) ends
        // the run too; the check below finds it.
        const uint64_t p = (words[i] >> 32) - start;
        if (p >= kElementRange) break;
        uint32_t bits = static_cast<uint32_t>(words[i]);
        float v;
        std::memcpy(&v, &bits, sizeof(v));
        const uint64_t bit = uint64_t{1} << (p & 63);
        const bool first = (seen[p >> 6] & bit) == 0;
        seen[p >> 6] |= bit;
        acc[p] = first ? v : acc[p] + v;
      }
      ws.cursors[q] = i;
    }
    for (uint64_t k = 0; k < kElementRange / 64; ++k) {
      for (uint64_t x = seen[k]; x != 0; x &= x - 1) {
        const uint64_t p = k * 64 + static_cast<uint64_t>(std::countr_zero(x));
        ws.served_positions.push_back(static_cast<int64_t>(start + p));
        ws.served_sums.push_back(acc[p]);
      }
      seen[k] = 0;
    }
  }
  for (size_t q = 0; q < parts; ++q) {
    if (ws.cursors[q] != ws.part_ends[q]) {
      throw FormatError(Where{}, "zen: server ", server, ": the positions rank ", q,
                        " pushed do not ascend (element ", ws.cursors[q], ")");
    }
  }
}

#define ZEN_INSTANTIATE(T, ...) \
  template int64_t ZenScheme::Aggregate<T>(const HashDomains&, int, int64_t);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

}  // namespace zen
