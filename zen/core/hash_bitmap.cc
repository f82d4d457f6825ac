#include "zen/core/hash_bitmap.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace zen {
namespace {

constexpr int64_t kMinRowsPerChunk = 1 << 16;

struct Header {
  uint32_t magic = kRowMagic;
  uint8_t version = kRowVersion;
  uint8_t encoding = 0;
  uint16_t reserved = 0;
  int64_t count = 0;
  int64_t width = 0;
  int64_t domain_size = 0;
};
static_assert(sizeof(Header) == kRowHeaderBytes);

size_t BitmapWords(int64_t domain_size) { return static_cast<size_t>((domain_size + 63) / 64); }

// Position of id in the sorted domain d, searching from position `from`
// onwards (galloping, then binary search); -1 if id is not in d[from..].
int64_t FindFrom(std::span<const int64_t> d, int64_t from, int64_t id) {
  const int64_t size = static_cast<int64_t>(d.size());
  int64_t lo = from, step = 1, hi = from;
  while (hi < size && d[static_cast<size_t>(hi)] < id) {
    lo = hi + 1;
    hi = from + step;
    step *= 2;
  }
  hi = std::min(hi + 1, size);
  const auto it = std::lower_bound(d.begin() + lo, d.begin() + hi, id);
  if (it == d.begin() + hi || *it != id) return -1;
  return it - d.begin();
}

void PutHeader(const Header& h, std::vector<std::byte>& out) {
  std::memcpy(out.data(), &h, sizeof(h));
}

}  // namespace

HashDomains::HashDomains(int64_t rows, const RowOwner& owner, int threads) : rows_(rows) {
  if (rows < 1 || static_cast<uint64_t>(rows) >= kHashPrime) {
    throw InvalidArgument(Where{}, "hash domains: rows ", rows, " is outside [1, 2^61 - 1)");
  }
  const int n = owner.servers();
  const size_t un = static_cast<size_t>(n);
  const int chunks = ChunkCount(threads, rows, kMinRowsPerChunk);
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(chunks), std::vector<int64_t>(un));
  ParallelChunks(threads, rows, kMinRowsPerChunk, [&](int c, int64_t begin, int64_t end) {
    std::vector<int64_t>& cnt = counts[static_cast<size_t>(c)];
    for (int64_t id = begin; id < end; ++id) ++cnt[static_cast<size_t>(owner(id))];
  });
  offsets_.assign(un + 1, 0);
  int64_t pos = 0;
  for (size_t s = 0; s < un; ++s) {
    offsets_[s] = pos;
    for (int c = 0; c < chunks; ++c) {
      const int64_t k = counts[static_cast<size_t>(c)][s];
      counts[static_cast<size_t>(c)][s] = pos;  // now the chunk's cursor
      pos += k;
    }
  }
  offsets_[un] = pos;
  ids_.resize(static_cast<size_t>(rows));
  ParallelChunks(threads, rows, kMinRowsPerChunk, [&](int c, int64_t begin, int64_t end) {
    std::vector<int64_t>& cur = counts[static_cast<size_t>(c)];
    for (int64_t id = begin; id < end; ++id) {
      ids_[static_cast<size_t>(cur[static_cast<size_t>(owner(id))]++)] = id;
    }
  });
}

HashDomains HashDomains::FromLists(int64_t rows, const std::vector<std::vector<int64_t>>& domains) {
  if (rows < 1 || domains.empty()) {
    throw InvalidArgument(Where{}, "hash domains: rows ", rows, " and ", domains.size(),
                          " domains must both be >= 1");
  }
  HashDomains d;
  d.rows_ = rows;
  d.offsets_.push_back(0);
  std::vector<uint8_t> seen(static_cast<size_t>(rows), 0);
  for (size_t j = 0; j < domains.size(); ++j) {
    for (size_t i = 0; i < domains[j].size(); ++i) {
      const int64_t id = domains[j][i];
      if (id < 0 || id >= rows || seen[static_cast<size_t>(id)] ||
          (i > 0 && id <= domains[j][i - 1])) {
        throw InvalidArgument(Where{}, "hash domains: id ", id, " at position ", i, " of domain ",
                              j, " is outside [0, ", rows, "), repeated or out of order");
      }
      seen[static_cast<size_t>(id)] = 1;
      d.ids_.push_back(id);
    }
    d.offsets_.push_back(static_cast<int64_t>(d.ids_.size()));
  }
  if (static_cast<int64_t>(d.ids_.size()) != rows) {
    throw InvalidArgument(Where{}, "hash domains: the domains cover ", d.ids_.size(), " of ", rows,
                          " rows");
  }
  return d;
}

std::span<const int64_t> HashDomains::domain(int server) const {
  return std::span<const int64_t>(ids_).subspan(
      static_cast<size_t>(offsets_[static_cast<size_t>(server)]),
      static_cast<size_t>(size(server)));
}

int64_t HashDomains::size(int server) const {
  return offsets_[static_cast<size_t>(server) + 1] - offsets_[static_cast<size_t>(server)];
}

size_t CooMessageBytes(int64_t count, int64_t width) {
  return kRowHeaderBytes + static_cast<size_t>(count) * sizeof(int64_t) +
         static_cast<size_t>(count) * static_cast<size_t>(width) * sizeof(float);
}

size_t BitmapMessageBytes(int64_t domain_size, int64_t count, int64_t width) {
  return kRowHeaderBytes + BitmapWords(domain_size) * sizeof(uint64_t) +
         static_cast<size_t>(count) * static_cast<size_t>(width) * sizeof(float);
}

RowEncoding ChooseEncoding(int64_t domain_size, int64_t count) {
  return BitmapWords(domain_size) < static_cast<size_t>(count) ? RowEncoding::kHashBitmap
                                                               : RowEncoding::kCoo;
}

RowEncoding EncodeRows(const HashDomains& domains, int server, int64_t width,
                       std::span<const int64_t> ids, std::span<const float> values,
                       EncodingChoice choice, std::vector<std::byte>& out) {
  const int64_t count = static_cast<int64_t>(ids.size());
  const std::span<const int64_t> d = domains.domain(server);
  const int64_t dsize = static_cast<int64_t>(d.size());
  if (values.size() != ids.size() * static_cast<size_t>(width)) {
    throw InvalidArgument(Where{}, "encode rows: ", values.size(), " values for ", count,
                          " rows of width ", width);
  }
  RowEncoding enc = choice == EncodingChoice::kCoo          ? RowEncoding::kCoo
                    : choice == EncodingChoice::kHashBitmap ? RowEncoding::kHashBitmap
                                                            : ChooseEncoding(dsize, count);
  Header h;
  h.encoding = static_cast<uint8_t>(enc);
  h.count = count;
  h.width = width;
  size_t index_bytes = 0;
  if (enc == RowEncoding::kCoo) {
    index_bytes = ids.size() * sizeof(int64_t);
    out.resize(CooMessageBytes(count, width));
  } else {
    h.domain_size = dsize;
    index_bytes = BitmapWords(dsize) * sizeof(uint64_t);
    out.assign(BitmapMessageBytes(dsize, count, width), std::byte{0});
  }
  PutHeader(h, out);
  std::byte* index = out.data() + kRowHeaderBytes;
  std::vector<uint64_t> words(enc == RowEncoding::kHashBitmap ? BitmapWords(dsize) : 0, 0);
  int64_t from = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = ids[static_cast<size_t>(i)];
    const int64_t p = FindFrom(d, from, id);
    if (p < 0) {
      throw InvalidArgument(Where{}, "encode rows: id ", id, " at position ", i,
                            " is not in the domain of server ", server,
                            " (or the ids are not ascending)");
    }
    from = p + 1;
    if (enc == RowEncoding::kHashBitmap) {
      words[static_cast<size_t>(p >> 6)] |= uint64_t{1} << (p & 63);
    }
  }
  if (index_bytes > 0) {  // (memcpy from an empty vector's null data() is UB)
    std::memcpy(index,
                enc == RowEncoding::kCoo ? static_cast<const void*>(ids.data())
                                         : static_cast<const void*>(words.data()),
                index_bytes);
  }
  if (!values.empty()) {
    std::memcpy(index + index_bytes, values.data(), values.size() * sizeof(float));
  }
  return enc;
}

void DecodeRows(std::span<const std::byte> message, const HashDomains& domains, int server,
                int64_t width, const Where& where, DecodedRows& out) {
  if (message.size() < kRowHeaderBytes) {
    throw FormatError(where, "row message from server ", server, " has ", message.size(),
                      " bytes, less than its ", kRowHeaderBytes, "-byte header");
  }
  Header h;
  std::memcpy(&h, message.data(), sizeof(h));
  if (h.magic != kRowMagic || h.version != kRowVersion || h.reserved != 0) {
    throw FormatError(where, "row message from server ", server, ": bad magic 0x", std::hex,
                      h.magic, std::dec, " / version ", int{h.version}, " (want 0x", std::hex,
                      kRowMagic, std::dec, " / ", int{kRowVersion}, ")");
  }
  if (h.width != width) {
    throw FormatError(where, "row message from server ", server, ": width ", h.width, ", expected ",
                      width);
  }
  const std::span<const int64_t> d = domains.domain(server);
  const int64_t dsize = static_cast<int64_t>(d.size());
  if (h.count < 0 || h.count > dsize) {
    throw FormatError(where, "row message from server ", server, ": count ", h.count,
                      " is outside [0, ", dsize, "] (the server's domain size)");
  }
  const size_t count = static_cast<size_t>(h.count);
  const std::byte* index = message.data() + kRowHeaderBytes;
  size_t expect = 0;
  if (h.encoding == static_cast<uint8_t>(RowEncoding::kCoo)) {
    if (h.domain_size != 0) {
      throw FormatError(where, "row message from server ", server, ": COO with domain size ",
                        h.domain_size);
    }
    expect = CooMessageBytes(h.count, width);
  } else if (h.encoding == static_cast<uint8_t>(RowEncoding::kHashBitmap)) {
    if (h.domain_size != dsize) {
      throw FormatError(where, "row message from server ", server, ": bitmap over ", h.domain_size,
                        " positions, but the server's domain has ", dsize);
    }
    expect = BitmapMessageBytes(dsize, h.count, width);
  } else {
    throw FormatError(where, "row message from server ", server, ": unknown encoding ",
                      int{h.encoding});
  }
  if (message.size() != expect) {
    throw FormatError(where, "row message from server ", server, ": ", message.size(),
                      " bytes, expected ", expect, " for ", h.count, " rows of width ", width);
  }
  out.encoding = static_cast<RowEncoding>(h.encoding);
  out.ids.resize(count);
  size_t index_bytes = 0;
  if (out.encoding == RowEncoding::kCoo) {
    index_bytes = count * sizeof(int64_t);
    if (count) std::memcpy(out.ids.data(), index, index_bytes);
    int64_t from = 0;
    for (size_t i = 0; i < count; ++i) {
      const int64_t id = out.ids[i];
      const int64_t p = (id < 0 || id >= domains.rows()) ? -1 : FindFrom(d, from, id);
      if (p < 0) {
        throw FormatError(where, "row message from server ", server, ": id ", id, " at position ",
                          i, " is not in the server's domain, out of order or repeated");
      }
      from = p + 1;
    }
  } else {
    const size_t words = BitmapWords(dsize);
    index_bytes = words * sizeof(uint64_t);
    std::vector<uint64_t> bits(words);
    if (words) std::memcpy(bits.data(), index, index_bytes);
    size_t pop = 0;
    for (uint64_t w : bits) pop += static_cast<size_t>(std::popcount(w));
    if (pop != count) {
      throw FormatError(where, "row message from server ", server, ": bitmap has ", pop,
                        " bits set but the header says ", count, " rows");
    }
    if (dsize % 64 != 0 && (bits.back() >> (dsize % 64)) != 0) {
      throw FormatError(where, "row message from server ", server,
                        ": bitmap has bits set past the domain's ", dsize, " positions");
    }
    size_t i = 0;
    for (size_t wi = 0; wi < words; ++wi) {
      for (uint64_t w = bits[wi]; w != 0; w &= w - 1) {
        const size_t p = wi * 64 + static_cast<size_t>(std::countr_zero(w));
        out.ids[i++] = d[p];
      }
    }
  }
  out.values.resize(count * static_cast<size_t>(width));
  if (!out.values.empty()) {
    std::memcpy(out.values.data(), index + index_bytes, out.values.size() * sizeof(float));
  }
}

}  // namespace zen
