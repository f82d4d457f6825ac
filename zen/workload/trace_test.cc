#include "zen/testing/reference.h"
#include "zen/workload/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("zen_trace_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Raw little-endian bytes of a vector.
template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A safetensors file assembled by hand (independent of WriteTrace).
std::string Assemble(const Json& header, const std::string& data) {
  const std::string text = header.dump();
  const uint64_t len = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + text + data;
}

// A valid hand-built trace: tensor "t" of shape [10, 2], world 2.
// rank 0 ids {1, 4} (I64), rank 1 ids {4} (I32).
struct HandBuilt {
  Json header;
  std::string data;
  HandBuilt() {
    header["__metadata__"] = {
        {"format", "zen-trace/1"}, {"world_size", "2"}, {"t.shape", "[10, 2]"}};
    const std::string i0 = Bytes(std::vector<int64_t>{1, 4});
    const std::string v0 = Bytes(std::vector<float>{1, 2, 3, 4});
    const std::string i1 = Bytes(std::vector<int32_t>{4});
    const std::string v1 = Bytes(std::vector<float>{5, 6});
    header["t/0/indices"] = {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {0, 16}}};
    header["t/0/values"] = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {16, 32}}};
    header["t/1/indices"] = {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {32, 36}}};
    header["t/1/values"] = {{"dtype", "F32"}, {"shape", {1, 2}}, {"data_offsets", {36, 44}}};
    data = i0 + v0 + i1 + v1;
  }
  std::string Write(const std::string& name) const {
    const std::string path = TempPath(name);
    WriteFile(path, Assemble(header, data));
    return path;
  }
};

// Reads a whole trace and returns the FormatError message ("" if it loads).
std::string LoadError(const std::string& path) {
  try {
    ReadTrace(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceTest, HandBuiltFileDecodes) {
  const std::string path = HandBuilt().Write("hand");
  Trace t = ReadTrace(path);
  ASSERT_EQ(t.world_size, 2);
  ASSERT_EQ(t.tensors.size(), 1u);
  EXPECT_EQ(t.tensors[0].name, "t");
  EXPECT_EQ(t.tensors[0].rows, 10);
  EXPECT_EQ(t.tensors[0].width, 2);
  EXPECT_EQ(t.tensors[0].nnz, (std::vector<int64_t>{2, 1}));
  const SparseTensor& r0 = t.Get("t", 0);
  EXPECT_EQ(std::vector<int64_t>(r0.ids().begin(), r0.ids().end()), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(std::vector<float>(r0.values().begin(), r0.values().end()),
            (std::vector<float>{1, 2, 3, 4}));
  const SparseTensor& r1 = t.Get("t", 1);
  EXPECT_EQ(std::vector<int64_t>(r1.ids().begin(), r1.ids().end()), (std::vector<int64_t>{4}));
  // The dense sum of both ranks, against values written down by hand.
  DenseReference ref(t.PerRank("t"));
  EXPECT_EQ(ref.present_rows(), 2);
  std::vector<float> expect(20, 0.0f);
  expect[2] = 1, expect[3] = 2, expect[8] = 3 + 5, expect[9] = 4 + 6;
  EXPECT_EQ(ref.CompareDense(expect).max_rel_error, 0.0);
}

Trace SampleTrace() {
  Trace t;
  t.world_size = 3;
  for (int step = 0; step < 2; ++step) {
    SyntheticSpec emb{"zipf", 5000, 8, 0.02, 1.1, static_cast<uint64_t>(step + 1)};
    t.Add("step" + std::to_string(step) + ".embedding", GenerateSynthetic(emb, 3));
    std::vector<SparseTensor> top = GenerateSynthetic({"zipf", 700, 1, 0.05, 0.0, 9}, 3);
    top[1] = SparseTensor::Empty(700, 1);  // a rank with nothing
    t.Add("step" + std::to_string(step) + ".output_topk", std::move(top));
  }
  t.metadata["generator"] = "trace_test";
  return t;
}

void ExpectSameTrace(const Trace& got, const Trace& want) {
  ASSERT_EQ(got.world_size, want.world_size);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  EXPECT_EQ(got.metadata, want.metadata);
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].name, want.tensors[i].name);
    EXPECT_EQ(got.tensors[i].rows, want.tensors[i].rows);
    EXPECT_EQ(got.tensors[i].width, want.tensors[i].width);
    EXPECT_EQ(got.tensors[i].nnz, want.tensors[i].nnz);
    for (int r = 0; r < want.world_size; ++r) {
      EXPECT_EQ(got.data[i][r], want.data[i][r]) << want.tensors[i].name << " rank " << r;
    }
  }
}

TEST(TraceTest, RoundTripI64) {
  const Trace want = SampleTrace();
  const std::string path = TempPath("rt64");
  WriteTrace(path, want);
  ExpectSameTrace(ReadTrace(path), want);
  // The data region starts 8-byte aligned and the file is exactly header + data.
  const std::string bytes = ReadFile(path);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  EXPECT_EQ(len % 8, 0u);
  size_t data = 0;
  for (const auto& per_rank : want.data) {
    for (const SparseTensor& s : per_rank) data += s.nnz() * 8 + s.values().size() * 4;
  }
  EXPECT_EQ(bytes.size(), 8 + len + data);
}

TEST(TraceTest, RoundTripI32IsSmaller) {
  const Trace want = SampleTrace();
  const std::string p64 = TempPath("rt64b"), p32 = TempPath("rt32");
  WriteTrace(p64, want);
  WriteTrace(p32, want, {TraceIndexType::kI32});
  ExpectSameTrace(ReadTrace(p32), want);
  size_t nnz = 0;
  for (const auto& per_rank : want.data) {
    for (const SparseTensor& s : per_rank) nnz += s.nnz();
  }
  const auto header_diff = [](const std::string& path) {
    uint64_t len = 0;
    std::memcpy(&len, ReadFile(path).data(), 8);
    return static_cast<int64_t>(len);
  };
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(p64) - std::filesystem::file_size(p32)),
            static_cast<int64_t>(4 * nnz) + header_diff(p64) - header_diff(p32));
}

TEST(TraceTest, ReaderLoadsOnlyWhatIsAsked) {
  const Trace want = SampleTrace();
  const std::string path = TempPath("subset");
  WriteTrace(path, want);
  TraceReader reader(path);
  ASSERT_EQ(reader.tensors().size(), 4u);
  EXPECT_EQ(reader.tensors()[2].name, "step1.embedding");  // file order
  EXPECT_EQ(reader.ReadIds("step1.embedding", 2),
            std::vector<int64_t>(want.data[2][2].ids().begin(), want.data[2][2].ids().end()));
  const std::string only[] = {"step0.output_topk"};
  Trace sub = ReadTrace(path, only);
  ASSERT_EQ(sub.tensors.size(), 1u);
  EXPECT_EQ(sub.Get("step0.output_topk", 0), want.data[1][0]);
  EXPECT_THROW(sub.Get("step0.embedding", 0), InvalidArgument);
  EXPECT_THROW(reader.ReadIds("nope", 0), InvalidArgument);
  EXPECT_THROW(reader.ReadIds("step0.embedding", 3), InvalidArgument);
  const std::string missing[] = {"nope"};
  EXPECT_THROW(ReadTrace(path, missing), InvalidArgument);
}

TEST(TraceTest, StepNames) {
  EXPECT_EQ(ParseStepName("step12.embedding").step, 12);
  EXPECT_EQ(ParseStepName("step12.embedding").base, "embedding");
  EXPECT_EQ(ParseStepName("embedding").step, -1);
  EXPECT_EQ(ParseStepName("step.x").step, -1);
  EXPECT_EQ(ParseStepName("step01.x").step, -1);
  EXPECT_TRUE(IsValidTraceTensorName("step0.output_topk"));
  EXPECT_FALSE(IsValidTraceTensorName("a/b"));
  EXPECT_FALSE(IsValidTraceTensorName(""));
}

TEST(TraceTest, SelectTensorsByFullNameBaseNameOrWholeStep) {
  std::vector<TraceTensorInfo> t;
  for (const char* n : {"step3.emb.weight", "step3.fc.bias", "step4.emb.weight", "step4.fc.bias"})
    t.push_back(TraceTensorInfo{n, 10, 1, {}});
  using V = std::vector<std::string>;
  EXPECT_EQ(SelectTraceTensors(t, "step4.fc.bias"), V{"step4.fc.bias"});
  EXPECT_EQ(SelectTraceTensors(t, "emb.weight"), V{"step3.emb.weight"});
  EXPECT_EQ(SelectTraceTensors(t, "emb.weight", 4), V{"step4.emb.weight"});
  EXPECT_EQ(SelectTraceTensors(t, ""), (V{"step3.emb.weight", "step3.fc.bias"}));
  EXPECT_EQ(SelectTraceTensors(t, "", 4), (V{"step4.emb.weight", "step4.fc.bias"}));
  try {
    SelectTraceTensors(t, "emb");
    FAIL() << "an unknown name must throw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("emb.weight, fc.bias"), std::string::npos) << what;
    EXPECT_NE(what.find("steps 3,4"), std::string::npos) << what;
  }
  EXPECT_THROW(SelectTraceTensors(t, "", 9), InvalidArgument);
  // Names without a step are one step of their own.
  const std::vector<TraceTensorInfo> plain = {{"a", 5, 1, {}}, {"b", 5, 1, {}}};
  EXPECT_EQ(SelectTraceTensors(plain, ""), (V{"a", "b"}));
  EXPECT_EQ(SelectTraceTensors(plain, "b"), V{"b"});
}

TEST(TraceTest, AddAndWriteRejectInconsistentTraces) {
  Trace t;
  t.world_size = 2;
  EXPECT_THROW(t.Add("x", {SparseTensor::Empty(5, 1)}), InvalidArgument);
  EXPECT_THROW(t.Add("x", {SparseTensor::Empty(5, 1), SparseTensor::Empty(6, 1)}), InvalidArgument);
  EXPECT_THROW(t.Add("a/b", {SparseTensor::Empty(5, 1), SparseTensor::Empty(5, 1)}),
               InvalidArgument);
  t.Add("x", {SparseTensor::Empty(5, 1), SparseTensor::Empty(5, 1)});
  EXPECT_THROW(t.Add("x", {SparseTensor::Empty(5, 1), SparseTensor::Empty(5, 1)}), InvalidArgument);
  t.metadata["x.shape"] = "[1, 1]";
  EXPECT_THROW(WriteTrace(TempPath("bad_meta"), t), InvalidArgument);
  t.metadata.clear();
  EXPECT_THROW(WriteTrace("/nonexistent-dir/x.safetensors", t), InvalidArgument);
}

// --- interoperability with the Python side (docs/trace-format.md) ---------

std::string RepoRoot() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

// Runs a command and returns its stdout; "" with ok = false on failure.
std::string RunCommand(const std::string& command, bool* ok) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  *ok = pipe != nullptr;
  if (!pipe) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  *ok = ::pclose(pipe) == 0;
  return out;
}

// "" when there is no /usr/bin/python3 with numpy (the test is skipped); the
// script itself must exist (the source tree is located through __FILE__).
std::string CheckScript() {
  bool ok = std::filesystem::exists("/usr/bin/python3");
  if (ok) RunCommand("/usr/bin/python3 -c 'import numpy' 2>/dev/null", &ok);
  if (!ok) return "";
  const std::string script = RepoRoot() + "/tools/capture/check_trace_format.py";
  EXPECT_TRUE(std::filesystem::exists(script)) << script;
  return "/usr/bin/python3 " + script;
}

TEST(TraceTest, NumpySnippetInDocsReadsOurFiles) {
  const std::string script = CheckScript();
  if (script.empty()) GTEST_SKIP() << "no /usr/bin/python3 with numpy or no source tree";
  const Trace want = SampleTrace();
  for (TraceIndexType type : {TraceIndexType::kI64, TraceIndexType::kI32}) {
    const std::string path = TempPath("numpy");
    WriteTrace(path, want, {type});
    bool ok = false;
    const std::string out = RunCommand(script + " read " + path, &ok);
    ASSERT_TRUE(ok) << out;
    const nlohmann::json got = nlohmann::json::parse(out);
    EXPECT_EQ(got["world_size"], want.world_size);
    ASSERT_EQ(got["tensors"].size(), want.tensors.size());
    for (size_t t = 0; t < want.tensors.size(); ++t) {
      const auto& g = got["tensors"][want.tensors[t].name];
      EXPECT_EQ(g["shape"][0], want.tensors[t].rows);
      EXPECT_EQ(g["shape"][1], want.tensors[t].width);
      for (int r = 0; r < want.world_size; ++r) {
        const SparseTensor& s = want.data[t][r];
        int64_t id_sum = 0;
        double value_sum = 0;
        for (int64_t id : s.ids()) id_sum += id;
        for (float v : s.values()) value_sum += v;
        EXPECT_EQ(g["ranks"][r][0], s.nnz());
        EXPECT_EQ(g["ranks"][r][1], id_sum);
        EXPECT_NEAR(g["ranks"][r][2].get<double>(), value_sum, 1e-6 * (1 + std::abs(value_sum)));
      }
    }
  }
}

TEST(TraceTest, ReadsFilesWrittenByThePythonWriter) {
  const std::string script = CheckScript();
  if (script.empty()) GTEST_SKIP() << "no /usr/bin/python3 with numpy or no source tree";
  const std::string path = TempPath("pywritten");
  bool ok = false;
  const std::string out = RunCommand(script + " write " + path, &ok);
  ASSERT_TRUE(ok) << out;
  const Trace t = ReadTrace(path);
  ASSERT_EQ(t.world_size, 3);
  ASSERT_EQ(t.tensors.size(), 2u);
  EXPECT_EQ(t.metadata.at("generator"), "check_trace_format.py");
  // step0.a: rank r holds ids r, r + (7 + r), ... below 50 with value (j + r) / 4 at flat j.
  for (int r = 0; r < 3; ++r) {
    const SparseTensor& a = t.Get("step0.a", r);
    std::vector<int64_t> ids;
    for (int64_t id = r; id < 50; id += 7 + r) ids.push_back(id);
    EXPECT_EQ(std::vector<int64_t>(a.ids().begin(), a.ids().end()), ids);
    ASSERT_EQ(a.values().size(), ids.size() * 3);
    for (size_t j = 0; j < a.values().size(); ++j) {
      EXPECT_EQ(a.values()[j], (static_cast<float>(j) + static_cast<float>(r)) / 4) << j;
    }
  }
  EXPECT_TRUE(t.Get("step0.b", 0).empty());
  EXPECT_EQ(t.Get("step0.b", 1).ToDense()[19], -2.0f);
  EXPECT_EQ(t.Get("step0.b", 2).ToDense()[5], 3.25f);
}

// The trace shipped in the repository (docs/workloads.md) passes every check
// and has the documented shape.
TEST(TraceTest, ShippedTraceIsValid) {
  const std::string path = RepoRoot() + "/data/traces/gcide-lm-n8.safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const Trace t = ReadTrace(path);  // validates ids of every rank
  EXPECT_EQ(t.world_size, 8);
  ASSERT_GE(t.tensors.size(), 2u);
  EXPECT_EQ(t.tensors[0].name, "step0.embedding");
  EXPECT_EQ(t.tensors[0].rows, 32000);
  EXPECT_EQ(t.tensors[0].width, 64);
  for (const TraceTensorInfo& info : t.tensors) {
    for (int r = 0; r < t.world_size; ++r) {
      // A real gradient row is never all zero.
      const SparseTensor& s = t.Get(info.name, r);
      EXPECT_GT(s.nnz(), 0u) << info.name << " rank " << r;
      for (size_t i = 0; i < s.nnz(); ++i) {
        const auto row = s.row(i);
        ASSERT_TRUE(std::any_of(row.begin(), row.end(), [](float v) { return v != 0; }))
            << info.name << " rank " << r << " row " << s.ids()[i];
      }
    }
  }
}

// --- malformed files ---------------------------------------------------------

TEST(TraceMalformedTest, UnreadableOrTooShort) {
  const std::string none = TempPath("does_not_exist");
  EXPECT_THAT(LoadError(none), HasSubstr(none));
  const std::string tiny = TempPath("tiny");
  WriteFile(tiny, "abc");
  EXPECT_THAT(LoadError(tiny), HasSubstr("shorter than the 8-byte header length"));
  std::string bytes = Assemble(HandBuilt().header, HandBuilt().data);
  const uint64_t huge = 1ull << 40;
  std::memcpy(bytes.data(), &huge, 8);
  const std::string lying = TempPath("lying_len");
  WriteFile(lying, bytes);
  EXPECT_THAT(LoadError(lying), HasSubstr("header length 1099511627776 exceeds"));
}

TEST(TraceMalformedTest, EveryTruncationIsAFormatError) {
  const HandBuilt h;
  const std::string full = Assemble(h.header, h.data);
  const std::string path = TempPath("trunc");
  for (size_t len = 0; len < full.size(); ++len) {
    WriteFile(path, full.substr(0, len));
    EXPECT_THAT(LoadError(path), HasSubstr(path)) << "truncated to " << len;
  }
  WriteFile(path, full.substr(0, full.size() - 3));
  EXPECT_THAT(LoadError(path), HasSubstr("'t/1/values': trace file"));
  EXPECT_THAT(LoadError(path), HasSubstr("run past the end of the data (41 bytes"));
}

// Random single-byte corruptions anywhere in the file either still decode
// (a value byte, a space) or are a FormatError naming the file; nothing else.
TEST(TraceMalformedTest, RandomByteFlipsNeverEscapeFormatError) {
  const HandBuilt h;
  const std::string full = Assemble(h.header, h.data);
  const std::string path = TempPath("flip");
  std::mt19937_64 rng(7);
  int rejected = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes = full;
    bytes[rng() % bytes.size()] = static_cast<char>(rng() % 256);
    WriteFile(path, bytes);
    try {
      ReadTrace(path);
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr(path));
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);  // most of the file is header: most flips must be caught
}

TEST(TraceMalformedTest, TrailingBytesAreRejected) {
  const HandBuilt h;
  const std::string path = TempPath("trailing");
  WriteFile(path, Assemble(h.header, h.data + "xx"));
  EXPECT_THAT(LoadError(path), HasSubstr("bytes [44, 46) at the end of the file belong to no"));
}

struct HeaderCase {
  const char* label;
  void (*mutate)(HandBuilt&);
  const char* message;  // expected substring
};

const HeaderCase kHeaderCases[] = {
    {"not json", [](HandBuilt& h) { h.header = Json("x"); }, "header is not a JSON object"},
    {"no metadata", [](HandBuilt& h) { h.header.erase("__metadata__"); }, "no __metadata__"},
    {"wrong format", [](HandBuilt& h) { h.header["__metadata__"]["format"] = "zen-trace/2"; },
     "format 'zen-trace/2' is not 'zen-trace/1'"},
    {"no format", [](HandBuilt& h) { h.header["__metadata__"].erase("format"); },
     "metadata has no 'format'"},
    {"world size zero", [](HandBuilt& h) { h.header["__metadata__"]["world_size"] = "0"; },
     "world_size '0' is not an integer"},
    {"world size text", [](HandBuilt& h) { h.header["__metadata__"]["world_size"] = "two"; },
     "world_size 'two'"},
    {"metadata not string", [](HandBuilt& h) { h.header["__metadata__"]["world_size"] = 2; },
     "metadata 'world_size' is not a string: 2"},
    {"bad shape meta", [](HandBuilt& h) { h.header["__metadata__"]["t.shape"] = "[10]"; },
     "tensor 't': trace file"},
    {"zero rows", [](HandBuilt& h) { h.header["__metadata__"]["t.shape"] = "[0, 2]"; },
     "metadata shape '[0, 2]' needs rows >= 1"},
    {"overlap",
     [](HandBuilt& h) {
       h.header["t/0/values"]["data_offsets"] = {8, 24};
       h.header["t/1/indices"]["data_offsets"] = {24, 28};
       h.header["t/1/values"]["data_offsets"] = {28, 36};
     },
     "overlap tensor 't/0/indices' ending at 16"},
    {"hole",
     [](HandBuilt& h) {
       h.header["t/1/values"]["data_offsets"] = {38, 46};
       h.data += "zz";
     },
     "tensor 't/1/values': trace file"},
    {"out of file",
     [](HandBuilt& h) {
       h.header["t/1/values"]["data_offsets"] = {36, 50};
     },
     "data_offsets [36, 50] run past the end"},
    {"begin after end",
     [](HandBuilt& h) {
       h.header["t/1/values"]["data_offsets"] = {44, 36};
     },
     "has begin > end"},
    {"offsets not pair", [](HandBuilt& h) { h.header["t/1/values"]["data_offsets"] = {36}; },
     "data_offsets [36] is not [begin, end]"},
    {"byte length",
     [](HandBuilt& h) {
       h.header["t/1/values"]["shape"] = {1, 3};
     },
     "data_offsets span 8 bytes but dtype F32 and shape need 12"},
    {"unknown dtype", [](HandBuilt& h) { h.header["t/1/values"]["dtype"] = "F16"; },
     "dtype 'F16' is not one of"},
    {"values wrong dtype", [](HandBuilt& h) { h.header["t/1/values"]["dtype"] = "I32"; },
     "values must be F32 [1, 2], got I32"},
    {"indices wrong dtype", [](HandBuilt& h) { h.header["t/1/indices"]["dtype"] = "F32"; },
     "indices must be I64 or I32"},
    {"values wrong width",
     [](HandBuilt& h) {
       h.header["t/1/values"]["shape"] = {2, 1};
     },
     "values must be F32 [1, 2], got F32 [2,1]"},
    {"negative shape",
     [](HandBuilt& h) {
       h.header["t/1/values"]["shape"] = {-1, 2};
     },
     "shape entry -1 is not an integer >= 0"},
    {"missing values",
     [](HandBuilt& h) {
       h.header.erase("t/1/values");
       h.data.resize(36);
     },
     "tensor 't': trace file '"},
    {"rank out of range",
     [](HandBuilt& h) {
       h.header["t/2/values"] = h.header["t/1/values"];
       h.header.erase("t/1/values");
     },
     "rank '2' is not in [0, 2)"},
    {"bad key",
     [](HandBuilt& h) {
       h.header["t/1/grads"] = h.header["t/1/values"];
       h.header.erase("t/1/values");
     },
     "name is not <tensor>/<rank>/indices"},
    {"no shape meta", [](HandBuilt& h) { h.header["__metadata__"].erase("t.shape"); },
     "no 't.shape' in the metadata"},
    {"world size beyond the arrays",
     [](HandBuilt& h) { h.header["__metadata__"]["world_size"] = "1048576"; },
     "1 tensors x world_size 1048576 need 2097152 arrays, the header has 4"},
    {"nnz above rows", [](HandBuilt& h) { h.header["__metadata__"]["t.shape"] = "[1, 2]"; },
     "nnz 2 exceeds rows 1"},
    // Issue 13, item 2: rows 2^20 x width 2^44 (2^64 elements) was accepted.
    {"rows x width overflows",
     [](HandBuilt& h) { h.header["__metadata__"]["t.shape"] = "[1048576, 17592186044416]"; },
     "rows 1048576 x width 17592186044416 overflows int64"},
    {"rows x width overflows at the limit",
     [](HandBuilt& h) { h.header["__metadata__"]["t.shape"] = "[4611686018427387904, 2]"; },
     "rows 4611686018427387904 x width 2 overflows int64"},
};

TEST(TraceMalformedTest, HeaderThatLies) {
  for (const HeaderCase& c : kHeaderCases) {
    HandBuilt h;
    c.mutate(h);
    const std::string path = h.Write("case");
    const std::string err = LoadError(path);
    EXPECT_THAT(err, HasSubstr(c.message)) << c.label;
    EXPECT_THAT(err, HasSubstr(path)) << c.label;
  }
}

struct IdCase {
  const char* label;
  std::vector<int64_t> ids0;
  std::vector<int32_t> ids1;
  const char* message;
};

TEST(TraceMalformedTest, BadIds) {
  const IdCase cases[] = {
      {"unsorted", {4, 1}, {4}, "rank 0, tensor 't': trace file"},
      {"unsorted value", {4, 1}, {4}, "id 1 at position 1 follows 4"},
      {"duplicate", {4, 4}, {4}, "id 4 at position 1 follows 4"},
      {"out of range", {1, 10}, {4}, "id 10 at position 1 is outside [0, 10)"},
      {"negative i32", {1, 4}, {-3}, "rank 1, tensor 't': trace file"},
      {"negative i32 value", {1, 4}, {-3}, "id -3 at position 0 is outside"},
  };
  for (const IdCase& c : cases) {
    HandBuilt h;
    const std::string v0 = Bytes(std::vector<float>{1, 2, 3, 4});
    const std::string v1 = Bytes(std::vector<float>{5, 6});
    h.data = Bytes(c.ids0) + v0 + Bytes(c.ids1) + v1;
    const std::string path = h.Write("ids");
    const std::string err = LoadError(path);
    EXPECT_THAT(err, HasSubstr(c.message)) << c.label;
    EXPECT_THAT(err, HasSubstr(path)) << c.label;
  }
}

// A sparse tensor of 2^62 rows travels through a trace exactly: the format
// and the reader size everything by the non-zeros.
TEST(TraceTest, TraceOfHugeSparseTensorsRoundTrips) {
  const int64_t rows = int64_t{1} << 62;
  Trace t;
  t.world_size = 2;
  t.Add("step0.emb", {SparseTensor::FromCoo(rows, 1, {0, rows - 1}, {1, 2}),
                      SparseTensor::FromCoo(rows, 1, {rows / 2}, {3})});
  const std::string path = TempPath("huge.safetensors");
  WriteTrace(path, t);
  const Trace back = ReadTrace(path);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].rows, rows);
  EXPECT_EQ(back.Get("step0.emb", 0).ids()[1], rows - 1);
  EXPECT_EQ(back.Get("step0.emb", 1).ids()[0], rows / 2);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace zen
