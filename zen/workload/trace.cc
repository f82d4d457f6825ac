#include "zen/workload/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <system_error>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

#include "zen/core/checked.h"
#include "zen/core/error.h"

namespace zen {
namespace {

static_assert(std::endian::native == std::endian::little,
              "zen-trace/1 is little-endian; add byte swapping for this host");

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as the safetensors reference
constexpr int kMaxWorldSize = 1 << 20;

std::string FileWhere(const std::string& path) { return "trace file '" + path + "': "; }

// Parses a canonical non-negative decimal (no sign, no leading zeros).
bool ParseCanonicalInt(std::string_view text, int64_t* out) {
  if (text.empty() || (text.size() > 1 && text[0] == '0')) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size() && *out >= 0;
}

// a * b for non-negative values, false on overflow of uint64.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

// One tensor entry of the safetensors header, as parsed.
struct Entry {
  std::string key;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data region
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, uint64_t data_size) : path_(path), data_size_(data_size) {}

  template <typename... Parts>
  [[noreturn]] void Fail(std::string_view tensor, const Parts&... parts) const {
    throw FormatError(Where{-1, tensor}, FileWhere(path_), parts...);
  }

  Entry ParseEntry(const std::string& key, const Json& value) const {
    if (!value.is_object()) Fail(key, "header entry is not an object");
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) Fail(key, "header entry has no '", field, "'");
    }
    Entry e;
    e.key = key;
    const Json& dtype = value.at("dtype");
    if (!dtype.is_string()) Fail(key, "dtype is not a string: ", dtype.dump());
    e.dtype = dtype.get<std::string>();
    const Json& shape = value.at("shape");
    if (!shape.is_array()) Fail(key, "shape is not an array: ", shape.dump());
    for (const Json& d : shape) {
      if (!d.is_number_unsigned()) Fail(key, "shape entry ", d.dump(), " is not an integer >= 0");
      e.shape.push_back(d.get<uint64_t>());
    }
    const Json& off = value.at("data_offsets");
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      Fail(key, "data_offsets ", off.dump(), " is not [begin, end]");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end) Fail(key, "data_offsets [", e.begin, ", ", e.end, "] has begin > end");
    if (e.end > data_size_) {
      Fail(key, "data_offsets [", e.begin, ", ", e.end, "] run past the end of the data (",
           data_size_, " bytes; file truncated?)");
    }
    CheckByteLength(e);
    return e;
  }

  // Offsets must tile [0, data_size) exactly: no overlap, no hole.
  void CheckTiling(std::vector<const Entry*> entries) const {
    std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
      return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
    });
    uint64_t at = 0;
    const Entry* prev = nullptr;
    for (const Entry* e : entries) {
      if (e->begin < at) {
        Fail(e->key, "data_offsets [", e->begin, ", ", e->end, "] overlap tensor '", prev->key,
             "' ending at ", at);
      }
      if (e->begin > at) Fail(e->key, "bytes [", at, ", ", e->begin, ") belong to no tensor");
      at = e->end;
      prev = e;
    }
    if (at != data_size_) {
      Fail("", "bytes [", at, ", ", data_size_, ") at the end of the file belong to no tensor");
    }
  }

 private:
  void CheckByteLength(const Entry& e) const {
    uint64_t elem = 0;
    if (e.dtype == "I64")
      elem = 8;
    else if (e.dtype == "I32" || e.dtype == "F32")
      elem = 4;
    else
      Fail(e.key, "dtype '", e.dtype, "' is not one of I64, I32, F32");
    uint64_t bytes = elem;
    for (uint64_t d : e.shape) {
      if (!MulOk(bytes, d, &bytes)) Fail(e.key, "shape overflows a 64-bit byte count");
    }
    if (bytes != e.end - e.begin) {
      Fail(e.key, "data_offsets span ", e.end - e.begin, " bytes but dtype ", e.dtype,
           " and shape need ", bytes);
    }
  }

  const std::string& path_;
  uint64_t data_size_;
};

// "<tensor>/<rank>/<kind>" -> parts; false if the key has another form.
bool SplitKey(std::string_view key, std::string_view* tensor, std::string_view* rank,
              std::string_view* kind) {
  const size_t last = key.rfind('/');
  if (last == std::string_view::npos || last == 0) return false;
  const size_t mid = key.rfind('/', last - 1);
  if (mid == std::string_view::npos) return false;
  *tensor = key.substr(0, mid);
  *rank = key.substr(mid + 1, last - mid - 1);
  *kind = key.substr(last + 1);
  return true;
}

// Parses "[rows, width]" from the metadata.
std::pair<int64_t, int64_t> ParseShape(const HeaderParser& p, const std::string& tensor,
                                       const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() ||
      !j[1].is_number_unsigned()) {
    p.Fail(tensor, "metadata shape '", text, "' is not [rows, width]");
  }
  const uint64_t rows = j[0].get<uint64_t>(), width = j[1].get<uint64_t>();
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  if (rows < 1 || width < 1 || rows > kMax || width > kMax) {
    p.Fail(tensor, "metadata shape '", text, "' needs rows >= 1 and width >= 1");
  }
  // The same rule as SparseTensor: the dense [rows x width] shape must be
  // countable in int64 (rows 2^20 x width 2^44 is not), so no reader of the
  // trace ever computes a wrapped size from it.
  int64_t elements = 0;
  if (!TryMul(static_cast<int64_t>(rows), static_cast<int64_t>(width), elements)) {
    p.Fail(tensor, "metadata shape '", text, "': rows ", rows, " x width ", width,
           " overflows int64");
  }
  return {static_cast<int64_t>(rows), static_cast<int64_t>(width)};
}

template <typename T>
std::span<char> AsBytes(std::vector<T>& v) {
  return std::span<char>(reinterpret_cast<char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

bool IsValidTraceTensorName(std::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '-';
  });
}

StepName ParseStepName(std::string_view name) {
  StepName out{-1, std::string(name)};
  if (!name.starts_with("step")) return out;
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot + 1 == name.size()) return out;
  int64_t step = 0;
  if (!ParseCanonicalInt(name.substr(4, dot - 4), &step)) return out;
  return StepName{step, std::string(name.substr(dot + 1))};
}

std::vector<std::string> SelectTraceTensors(std::span<const TraceTensorInfo> tensors,
                                            std::string_view name, int64_t step) {
  std::vector<std::string> out;
  if (tensors.empty()) throw InvalidArgument("the trace holds no tensor");
  if (step < 0 && !name.empty()) {
    for (const TraceTensorInfo& t : tensors) {
      if (t.name == name) return {t.name};
    }
  }
  // The step meant: the given one, else the first holding `name` (any, when
  // name is empty).
  int64_t chosen = step;
  if (chosen < 0) {
    chosen = ParseStepName(tensors.front().name).step;
    for (const TraceTensorInfo& t : tensors) {
      const StepName s = ParseStepName(t.name);
      if (name.empty() || s.base == name) {
        chosen = s.step;
        break;
      }
    }
  }
  for (const TraceTensorInfo& t : tensors) {
    const StepName s = ParseStepName(t.name);
    if (s.step != chosen) continue;
    if (name.empty() || s.base == name || t.name == name) out.push_back(t.name);
  }
  if (!out.empty()) return out;
  // Nothing: list what there is, bases once, with the steps they cover.
  std::vector<std::string> bases;
  std::set<int64_t> steps;
  for (const TraceTensorInfo& t : tensors) {
    const StepName s = ParseStepName(t.name);
    if (std::find(bases.begin(), bases.end(), s.base) == bases.end()) bases.push_back(s.base);
    if (s.step >= 0) steps.insert(s.step);
  }
  std::string list, step_list;
  for (const std::string& b : bases) {
    if (!list.empty()) list += ", ";
    list += b;
  }
  for (int64_t k : steps) {
    if (!step_list.empty()) step_list += ",";
    step_list += std::to_string(k);
  }
  throw InvalidArgument("no tensor '" + std::string(name) + "'" +
                        (step >= 0 ? " at step " + std::to_string(step) : std::string()) +
                        " in the trace; its tensors are " + list +
                        (steps.empty() ? std::string()
                                       : " at steps " + step_list + " (full names step<k>.<name>)"));
}

// --- Trace -----------------------------------------------------------------

void Trace::Add(const std::string& name, std::vector<SparseTensor> per_rank) {
  if (!IsValidTraceTensorName(name)) {
    throw InvalidArgument(Where{-1, name},
                          "not a valid trace tensor name (1-200 chars of [A-Za-z0-9_.:-])");
  }
  if (world_size < 1) throw InvalidArgument(Where{-1, name}, "set world_size >= 1 before Add");
  if (per_rank.size() != static_cast<size_t>(world_size)) {
    throw InvalidArgument(Where{-1, name}, "has ", per_rank.size(), " ranks, world_size is ",
                          world_size);
  }
  if (index.size() != tensors.size()) {
    index.clear();
    for (size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
  }
  if (index.contains(name)) throw InvalidArgument(Where{-1, name}, "added twice");
  TraceTensorInfo info{name, per_rank[0].rows(), per_rank[0].width(), {}};
  ValidateShape(info.rows, info.width, name);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    SparseTensor& t = per_rank[r];
    if (t.rows() != info.rows || t.width() != info.width) {
      throw InvalidArgument(Where{static_cast<int>(r), name}, "shape [", t.rows(), ", ", t.width(),
                            "] differs from rank 0's [", info.rows, ", ", info.width, "]");
    }
    t.set_name(name);
    info.nnz.push_back(static_cast<int64_t>(t.nnz()));
  }
  index.emplace(name, tensors.size());
  tensors.push_back(std::move(info));
  data.push_back(std::move(per_rank));
}

size_t Trace::IndexOf(std::string_view tensor) const {
  const auto it = index.find(std::string(tensor));
  if (it != index.end() && it->second < tensors.size() && tensors[it->second].name == tensor) {
    return it->second;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {  // `tensors` filled without Add
    if (tensors[i].name == tensor) return i;
  }
  throw InvalidArgument(Where{-1, tensor}, "not in the trace (", tensors.size(), " tensors)");
}

std::span<const SparseTensor> Trace::PerRank(std::string_view tensor) const {
  const size_t i = IndexOf(tensor);
  if (i >= data.size()) throw InvalidArgument(Where{-1, tensor}, "listed but not loaded");
  return data[i];
}

const SparseTensor& Trace::Get(std::string_view tensor, int rank) const {
  std::span<const SparseTensor> all = PerRank(tensor);
  if (rank < 0 || static_cast<size_t>(rank) >= all.size()) {
    throw InvalidArgument(Where{rank, tensor}, "rank outside [0, ", all.size(), ")");
  }
  return all[static_cast<size_t>(rank)];
}

// --- TraceReader -----------------------------------------------------------

TraceReader::TraceReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path_, ec);
  if (ec) throw FormatError(FileWhere(path_) + "cannot be read: " + ec.message());
  in_.open(path_, std::ios::binary);
  if (!in_) throw FormatError(FileWhere(path_) + "cannot be opened");
  const uint64_t file_size = size;
  if (file_size < 8) {
    throw FormatError(detail::Concat(FileWhere(path_), "is ", file_size,
                                     " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  char len_bytes[8];
  ReadBytes(0, len_bytes, "header length");
  std::memcpy(&header_len, len_bytes, 8);
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    throw FormatError(detail::Concat(FileWhere(path_), "header length ", header_len,
                                     " exceeds the file (", file_size,
                                     " bytes) or the 100 MiB limit"));
  }
  std::string header(header_len, '\0');
  ReadBytes(8, header, "header");
  ParseHeader(header, 8 + header_len, file_size);
}

void TraceReader::ReadBytes(uint64_t offset, std::span<char> out, std::string_view what) {
  if (out.empty()) return;
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(out.data(), static_cast<std::streamsize>(out.size()));
  if (!in_ || static_cast<size_t>(in_.gcount()) != out.size()) {
    throw FormatError(detail::Concat(FileWhere(path_), "short read of ", what, " (", out.size(),
                                     " bytes at offset ", offset, ")"));
  }
}

void TraceReader::ParseHeader(std::string_view text, uint64_t data_begin, uint64_t file_size) {
  HeaderParser p(path_, file_size - data_begin);
  Json header = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) p.Fail("", "header is not a JSON object");
  if (!header.contains("__metadata__") || !header["__metadata__"].is_object()) {
    p.Fail("", "header has no __metadata__ object");
  }
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : header["__metadata__"].items()) {
    if (!v.is_string()) p.Fail("", "metadata '", k, "' is not a string: ", v.dump());
    meta[k] = v.get<std::string>();
  }
  if (!meta.contains("format")) p.Fail("", "metadata has no 'format'");
  if (meta["format"] != kTraceFormat) {
    p.Fail("", "format '", meta["format"], "' is not '", kTraceFormat, "'");
  }
  int64_t world = 0;
  if (!meta.contains("world_size") || !ParseCanonicalInt(meta["world_size"], &world) || world < 1 ||
      world > kMaxWorldSize) {
    p.Fail("", "world_size '", meta["world_size"], "' is not an integer in [1, ", kMaxWorldSize,
           "]");
  }
  world_size_ = static_cast<int>(world);

  // Tensors declared by "<tensor>.shape" metadata.
  std::map<std::string, size_t> index;
  for (const auto& [k, v] : meta) {
    if (k == "format" || k == "world_size") continue;
    if (!k.ends_with(".shape")) {
      metadata_[k] = v;
      continue;
    }
    const std::string name = k.substr(0, k.size() - 6);
    if (!IsValidTraceTensorName(name)) p.Fail(name, "metadata key '", k, "': bad tensor name");
    auto [rows, width] = ParseShape(p, name, v);
    index[name] = tensors_.size();
    tensors_.push_back(
        TraceTensorInfo{name, rows, width, std::vector<int64_t>(world_size_, int64_t{-1})});
  }
  // Each (tensor, rank) needs arrays in the header: bounds what is allocated
  // below by the header's size, whatever world_size claims.
  const uint64_t arrays = header.size() - 1;
  if (static_cast<uint64_t>(tensors_.size()) * static_cast<uint64_t>(world_size_) > arrays) {
    p.Fail("", tensors_.size(), " tensors x world_size ", world_size_, " need ",
           2 * tensors_.size() * static_cast<uint64_t>(world_size_), " arrays, the header has ",
           arrays);
  }
  slots_.assign(tensors_.size(), std::vector<Slot>(world_size_));
  std::vector<std::vector<uint8_t>> seen(tensors_.size(), std::vector<uint8_t>(world_size_, 0));

  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [k, v] : header.items()) {
    if (k == "__metadata__") continue;
    entries.push_back(p.ParseEntry(k, v));
  }
  std::vector<const Entry*> ptrs;
  for (const Entry& e : entries) ptrs.push_back(&e);
  p.CheckTiling(ptrs);

  // nnz from the indices entries first, then check values against them.
  for (int pass = 0; pass < 2; ++pass) {
    for (const Entry& e : entries) {
      std::string_view tname, rank_text, kind;
      int64_t rank = 0;
      if (!SplitKey(e.key, &tname, &rank_text, &kind) || (kind != "indices" && kind != "values")) {
        p.Fail(e.key, "name is not <tensor>/<rank>/indices or <tensor>/<rank>/values");
      }
      if ((kind == "indices") != (pass == 0)) continue;
      auto it = index.find(std::string(tname));
      if (it == index.end()) p.Fail(e.key, "no '", tname, ".shape' in the metadata");
      if (!ParseCanonicalInt(rank_text, &rank) || rank >= world_size_) {
        p.Fail(e.key, "rank '", rank_text, "' is not in [0, ", world_size_, ")");
      }
      TraceTensorInfo& info = tensors_[it->second];
      Slot& slot = slots_[it->second][static_cast<size_t>(rank)];
      const Blob blob{e.dtype == "I32", data_begin + e.begin, data_begin + e.end};
      if (kind == "indices") {
        if ((e.dtype != "I64" && e.dtype != "I32") || e.shape.size() != 1) {
          p.Fail(e.key, "indices must be I64 or I32 of shape [nnz], got ", e.dtype, " rank-",
                 e.shape.size());
        }
        if (e.shape[0] > static_cast<uint64_t>(info.rows)) {
          p.Fail(e.key, "nnz ", e.shape[0], " exceeds rows ", info.rows);
        }
        info.nnz[static_cast<size_t>(rank)] = static_cast<int64_t>(e.shape[0]);
        slot.indices = blob;
        seen[it->second][static_cast<size_t>(rank)] |= 1;
        continue;
      }
      const int64_t nnz = info.nnz[static_cast<size_t>(rank)];
      if (nnz < 0) p.Fail(e.key, "values without indices");
      if (e.dtype != "F32" || e.shape.size() != 2 || e.shape[0] != static_cast<uint64_t>(nnz) ||
          e.shape[1] != static_cast<uint64_t>(info.width)) {
        p.Fail(e.key, "values must be F32 [", nnz, ", ", info.width, "], got ", e.dtype, " ",
               Json(e.shape).dump());
      }
      slot.values = blob;
      seen[it->second][static_cast<size_t>(rank)] |= 2;
    }
  }
  for (size_t t = 0; t < tensors_.size(); ++t) {
    for (int r = 0; r < world_size_; ++r) {
      if (seen[t][static_cast<size_t>(r)] != 3) {
        p.Fail(tensors_[t].name, "rank ", r, " has no ",
               (seen[t][static_cast<size_t>(r)] & 1) ? "values" : "indices");
      }
    }
  }
  // List tensors in the order their data appears in the file.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return slots_[a][0].indices.begin < slots_[b][0].indices.begin;
  });
  std::vector<TraceTensorInfo> tensors;
  std::vector<std::vector<Slot>> slots;
  for (size_t i : order) {
    tensors.push_back(std::move(tensors_[i]));
    slots.push_back(std::move(slots_[i]));
  }
  tensors_ = std::move(tensors);
  slots_ = std::move(slots);
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const TraceTensorInfo& TraceReader::info(std::string_view tensor) const {
  if (const auto it = by_name_.find(tensor); it != by_name_.end()) return tensors_[it->second];
  throw InvalidArgument(Where{-1, tensor}, FileWhere(path_), "no such tensor (", tensors_.size(),
                        " tensors)");
}

const TraceReader::Slot& TraceReader::SlotOf(std::string_view tensor, int rank,
                                             const TraceTensorInfo** info_out) const {
  const TraceTensorInfo& i = info(tensor);
  if (rank < 0 || rank >= world_size_) {
    throw InvalidArgument(Where{rank, tensor}, FileWhere(path_), "rank outside [0, ", world_size_,
                          ")");
  }
  *info_out = &i;
  return slots_[static_cast<size_t>(&i - tensors_.data())][static_cast<size_t>(rank)];
}

std::vector<int64_t> TraceReader::ReadIds(std::string_view tensor, int rank) {
  const TraceTensorInfo* info = nullptr;
  const Slot& slot = SlotOf(tensor, rank, &info);
  const size_t nnz = static_cast<size_t>(info->nnz[static_cast<size_t>(rank)]);
  std::vector<int64_t> ids(nnz);
  const std::string what = info->name + "/" + std::to_string(rank) + "/indices";
  if (slot.indices.i32) {
    std::vector<int32_t> narrow(nnz);
    ReadBytes(slot.indices.begin, AsBytes(narrow), what);
    std::copy(narrow.begin(), narrow.end(), ids.begin());
  } else {
    ReadBytes(slot.indices.begin, AsBytes(ids), what);
  }
  for (size_t i = 0; i < nnz; ++i) {
    if (ids[i] < 0 || ids[i] >= info->rows) {
      throw FormatError(Where{rank, info->name}, FileWhere(path_), "id ", ids[i], " at position ",
                        i, " is outside [0, ", info->rows, ")");
    }
    if (i > 0 && ids[i] <= ids[i - 1]) {
      throw FormatError(Where{rank, info->name}, FileWhere(path_), "ids not sorted and unique: id ",
                        ids[i], " at position ", i, " follows ", ids[i - 1]);
    }
  }
  return ids;
}

SparseTensor TraceReader::ReadRank(std::string_view tensor, int rank) {
  std::vector<int64_t> ids = ReadIds(tensor, rank);
  const TraceTensorInfo* info = nullptr;
  const Slot& slot = SlotOf(tensor, rank, &info);
  // nnz x width x 4 is the byte length the header check matched against
  // the file, so it fits; checked anyway.
  std::vector<float> values(CheckedMul(ids.size(), static_cast<size_t>(info->width),
                                       Where{rank, info->name}, "trace values"));
  ReadBytes(slot.values.begin, AsBytes(values),
            info->name + "/" + std::to_string(rank) + "/values");
  return SparseTensor::FromSorted(info->rows, info->width, std::move(ids), std::move(values),
                                  info->name);
}

std::vector<SparseTensor> TraceReader::ReadTensor(std::string_view tensor) {
  std::vector<SparseTensor> out;
  out.reserve(static_cast<size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) out.push_back(ReadRank(tensor, r));
  return out;
}

Trace ReadTrace(const std::string& path, std::span<const std::string> only) {
  TraceReader reader(path);
  Trace trace;
  trace.world_size = reader.world_size();
  trace.metadata = reader.metadata();
  for (const std::string& name : only) reader.info(name);  // InvalidArgument if absent
  for (const TraceTensorInfo& info : reader.tensors()) {
    if (!only.empty() && std::find(only.begin(), only.end(), info.name) == only.end()) continue;
    trace.tensors.push_back(info);
    trace.data.push_back(reader.ReadTensor(info.name));
  }
  return trace;
}

// --- WriteTrace ------------------------------------------------------------

namespace {

void CheckWritable(const Trace& trace, const TraceWriteOptions& options) {
  if (trace.world_size < 1) throw InvalidArgument("WriteTrace: world_size must be >= 1");
  if (trace.data.size() != trace.tensors.size()) {
    throw InvalidArgument(detail::Concat("WriteTrace: ", trace.tensors.size(), " tensors but ",
                                         trace.data.size(), " data entries"));
  }
  for (const auto& [k, v] : trace.metadata) {
    if (k == "format" || k == "world_size" || k.ends_with(".shape")) {
      throw InvalidArgument("WriteTrace: metadata key '" + k + "' is reserved");
    }
  }
  std::unordered_set<std::string_view> names;
  for (size_t t = 0; t < trace.tensors.size(); ++t) {
    const TraceTensorInfo& info = trace.tensors[t];
    if (!IsValidTraceTensorName(info.name)) {
      throw InvalidArgument(Where{-1, info.name}, "not a valid trace tensor name");
    }
    if (!names.insert(info.name).second) {
      throw InvalidArgument(Where{-1, info.name}, "is listed twice");
    }
    if (trace.data[t].size() != static_cast<size_t>(trace.world_size)) {
      throw InvalidArgument(Where{-1, info.name}, "has ", trace.data[t].size(),
                            " ranks, world_size is ", trace.world_size);
    }
    if (options.index_type == TraceIndexType::kI32 &&
        info.rows > std::numeric_limits<int32_t>::max()) {
      throw InvalidArgument(Where{-1, info.name}, "rows ", info.rows, " do not fit I32 indices");
    }
    for (size_t r = 0; r < trace.data[t].size(); ++r) {
      const SparseTensor& s = trace.data[t][r];
      if (s.rows() != info.rows || s.width() != info.width) {
        throw InvalidArgument(Where{static_cast<int>(r), info.name}, "shape [", s.rows(), ", ",
                              s.width(), "] differs from the listed [", info.rows, ", ", info.width,
                              "]");
      }
    }
  }
}

// The strerror text of errno `e`.
std::string ErrnoText(int e) { return std::error_code(e, std::generic_category()).message(); }

// A file being written as `path`'s replacement: a new file in the same
// directory (so that rename is atomic), written through a buffer, fsynced,
// then renamed over `path`; the directory is fsynced after. Until Commit
// succeeds, `path` is untouched; a failure removes the new file. Creating
// it (a directory that does not exist or cannot be written) is
// InvalidArgument, as for any path that cannot be written; writing,
// fsync and rename failures (a full disk, a quota, a file size limit, EIO)
// are zen::Error naming the path, the step, the bytes written and errno,
// and saying that the old file is unchanged.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path) {
    const std::filesystem::path target(path);
    std::filesystem::path dir = target.parent_path();
    if (dir.empty()) dir = ".";
    dir_ = dir.string();
    std::random_device rd;
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      std::string name = ".";
      name += target.filename().string();
      name += detail::Concat(".", ::getpid(), ".", rd(), ".tmp");
      tmp_ = (dir / name).string();
      // 0666 less the umask, as for any new file; O_EXCL: never an existing
      // file or link under that name.
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) {
      throw InvalidArgument("WriteTrace: cannot create a file in '" + dir_ + "' to write '" +
                            path + "': " + ErrnoText(errno));
    }
    buffer_.reserve(kBuffer);
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void Write(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      if (buffer_.size() == kBuffer) Flush();
      const size_t n = std::min(bytes, kBuffer - buffer_.size());
      buffer_.append(p, n);
      p += n;
      bytes -= n;
    }
  }

  void Commit() {
    Flush();
    if (::fsync(fd_) != 0) Fail("fsync of", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) Fail("close of", errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) Fail("rename onto", errno);
    committed_ = true;
    // The rename itself reaches the disk with the directory.
    const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  static constexpr size_t kBuffer = size_t{1} << 20;

  void Flush() {
    size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) Fail("writing", n < 0 ? errno : ENOSPC);
      done += static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
    }
    buffer_.clear();
  }

  [[noreturn]] void Fail(const char* step, int e) {
    throw Error(detail::Concat("WriteTrace: ", step, " '", path_, "' failed after ", written_,
                               " bytes: ", ErrnoText(e), " (errno ", e, "); '", path_,
                               "' is unchanged"));
  }

  std::string path_, dir_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  std::string buffer_;
};

}  // namespace

void WriteTrace(const std::string& path, const Trace& trace, const TraceWriteOptions& options) {
  CheckWritable(trace, options);
  const bool i32 = options.index_type == TraceIndexType::kI32;
  // The header as text, one member at a time (an ordered_json object looks
  // each new key up linearly: quadratic in the tensors); names are unique
  // (CheckWritable) and metadata keys cannot collide with "<name>.shape".
  const auto member = [](std::string& out, std::string_view key, const auto& value) {
    out += out.empty() ? "{" : ",";
    out += Json(key).dump();
    out += ':';
    out += OrderedJson(value).dump();
  };
  std::string meta;
  member(meta, "format", std::string(kTraceFormat));
  member(meta, "world_size", std::to_string(trace.world_size));
  for (const TraceTensorInfo& info : trace.tensors) {
    member(meta, info.name + ".shape", detail::Concat("[", info.rows, ", ", info.width, "]"));
  }
  for (const auto& [k, v] : trace.metadata) member(meta, k, v);
  std::string text = "{\"__metadata__\":" + meta + "}";
  uint64_t at = 0;
  for (size_t t = 0; t < trace.tensors.size(); ++t) {
    for (size_t r = 0; r < trace.data[t].size(); ++r) {
      const SparseTensor& s = trace.data[t][r];
      const std::string key = detail::Concat(trace.tensors[t].name, "/", r, "/");
      const uint64_t ib = s.nnz() * (i32 ? 4 : 8), vb = s.values().size() * sizeof(float);
      member(text, key + "indices",
             OrderedJson{{"dtype", i32 ? "I32" : "I64"},
                         {"shape", {s.nnz()}},
                         {"data_offsets", {at, at + ib}}});
      at += ib;
      member(text, key + "values",
             OrderedJson{{"dtype", "F32"},
                         {"shape", {s.nnz(), s.width()}},
                         {"data_offsets", {at, at + vb}}});
      at += vb;
    }
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  AtomicFile out(path);
  const uint64_t len = text.size();
  out.Write(&len, 8);
  out.Write(text.data(), text.size());
  std::vector<int32_t> narrow;
  for (size_t t = 0; t < trace.tensors.size(); ++t) {
    for (const SparseTensor& s : trace.data[t]) {
      if (i32) {
        narrow.assign(s.ids().begin(), s.ids().end());
        out.Write(narrow.data(), narrow.size() * 4);
      } else {
        out.Write(s.ids().data(), s.nnz() * 8);
      }
      out.Write(s.values().data(), s.values().size() * sizeof(float));
    }
  }
  out.Commit();
}

}  // namespace zen
