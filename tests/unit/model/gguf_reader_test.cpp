// The GGUF reader on files written field by field (gguf_test_writer.h): metadata of every
// type, shapes, offsets and alignment; then damaged files, each of which must give one error
// naming the file and the problem, never a crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "backend/cpu/quant.h"
#include "gguf_test_writer.h"
#include "model/loader/gguf.h"
#include "model/loader/gguf_parse.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using namespace deepinfer::testing;

const std::string kName = "model.gguf";

Result<GgufContents> parse(const std::vector<uint8_t>& bytes) { return parse_gguf(bytes, kName); }

// The error of parsing `bytes`, checked to name the file.
Status parse_error(const std::vector<uint8_t>& bytes) {
  auto r = parse(bytes);
  EXPECT_FALSE(r.ok()) << "a damaged file parsed";
  if (r.ok()) return {};
  EXPECT_EQ(r.status().message().rfind(kName + ": ", 0), 0u) << r.status().message();
  return r.status();
}

bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

const MetaArray& array_of(const MetaValue& v) { return *std::get<std::shared_ptr<MetaArray>>(v.value); }

// ---- valid files -------------------------------------------------------------------------------

TEST(GgufReader, EveryMetadataTypeRoundTrips) {
  const auto bytes = sample_gguf_writer().bytes();
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Metadata& m = r->metadata;
  EXPECT_EQ(r->version, 3u);
  EXPECT_EQ(m.all().size(), 20u);

  auto type_of = [&](const char* key) { return m.find(key) ? m.find(key)->type : MetaType::kArray; };
  EXPECT_EQ(type_of("test.u8"), MetaType::kU8);
  EXPECT_EQ(type_of("test.i8"), MetaType::kI8);
  EXPECT_EQ(type_of("test.u16"), MetaType::kU16);
  EXPECT_EQ(type_of("test.i16"), MetaType::kI16);
  EXPECT_EQ(type_of("test.u32"), MetaType::kU32);
  EXPECT_EQ(type_of("test.i32"), MetaType::kI32);
  EXPECT_EQ(type_of("test.u64"), MetaType::kU64);
  EXPECT_EQ(type_of("test.i64"), MetaType::kI64);
  EXPECT_EQ(type_of("test.f32"), MetaType::kF32);
  EXPECT_EQ(type_of("test.f64"), MetaType::kF64);
  EXPECT_EQ(type_of("test.bool"), MetaType::kBool);
  EXPECT_EQ(type_of("general.name"), MetaType::kString);

  EXPECT_EQ(*m.get_uint("test.u8"), 200u);
  EXPECT_EQ(*m.get_int("test.i8"), -100);
  EXPECT_EQ(*m.get_uint("test.u16"), 60000u);
  EXPECT_EQ(*m.get_int("test.i16"), -30000);
  EXPECT_EQ(*m.get_uint("test.u32"), 4000000000u);
  EXPECT_EQ(*m.get_int("test.i32"), -2000000000);
  EXPECT_EQ(*m.get_uint("test.u64"), 18000000000000000000ull);
  EXPECT_EQ(*m.get_int("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(*m.get_float("test.f32"), 1.5);
  EXPECT_EQ(*m.get_float("test.f64"), -2.25);
  EXPECT_EQ(*m.get_bool("test.bool"), true);
  EXPECT_EQ(*m.get_string("general.name"), "tiny \xce\xbb");
  EXPECT_EQ(*m.get_string("test.empty_string"), "");
  EXPECT_EQ(*m.get_string("test.string_with_nul"), std::string("a\0b", 3));
  EXPECT_EQ(*m.get_string_array("test.strings"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*m.get_float_array("test.floats"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(array_of(*m.find("test.floats")).element_type, MetaType::kF32);
  EXPECT_TRUE(m.get_int_array("test.empty_array")->empty());
  EXPECT_EQ(array_of(*m.find("test.empty_array")).element_type, MetaType::kI32);

  const MetaArray& nested = array_of(*m.find("test.nested"));
  EXPECT_EQ(nested.element_type, MetaType::kArray);
  ASSERT_EQ(nested.items.size(), 3u);
  const MetaArray& first = array_of(nested.items[0]);
  EXPECT_EQ(first.element_type, MetaType::kI16);
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(first.items[1].type, MetaType::kI16);
  EXPECT_EQ(std::get<int64_t>(first.items[1].value), -2);
  EXPECT_EQ(std::get<std::string>(array_of(nested.items[1]).items[0].value), "deep");
  const MetaArray& third = array_of(nested.items[2]);
  ASSERT_EQ(third.items.size(), 1u);
  EXPECT_EQ(std::get<uint64_t>(array_of(third.items[0]).items[0].value), 7u);
}

TEST(GgufReader, ShapesAreReversedAndDataIsInPlace) {
  GgufWriter w = sample_gguf_writer();
  const auto bytes = w.bytes();
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->alignment, 32u);
  EXPECT_EQ(r->data_offset, w.data_offset());
  EXPECT_EQ(r->data_offset % 32, 0u);

  const TensorView& norm = r->tensors[0];
  EXPECT_EQ(norm.name, "blk.0.attn_norm.weight");
  EXPECT_EQ(norm.dtype, DType::kF32);
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(norm.n_bytes, 24u);
  EXPECT_EQ(norm.file, kName);
  EXPECT_EQ(norm.data, bytes.data() + w.data_offset() + w.tensor_offsets()[0]);
  float f[6];
  std::memcpy(f, norm.data, sizeof(f));
  EXPECT_EQ(f[5], 5.0f);

  const TensorView& q = r->tensors[1];
  EXPECT_EQ(q.dtype, DType::kQ4_0);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(q.n_bytes, 72u);
  EXPECT_EQ(q.row_bytes(), 36u);
  EXPECT_EQ(w.tensor_offsets()[1], 32u);  // 24 bytes, padded to 32
  EXPECT_EQ(q.data, bytes.data() + w.data_offset() + 32);
  std::vector<float> row(64);
  cpu::dequantize_row(q.dtype, q.data, row.data(), 64);
  EXPECT_EQ(row[0], 0.5f * ((q.data[2] & 15) - 8));

  const TensorView& out = r->tensors[2];
  EXPECT_EQ(out.shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(out.data + out.n_bytes, bytes.data() + bytes.size());
}

TEST(GgufReader, CustomAlignment) {
  for (uint32_t alignment : {8u, 64u, 4096u}) {
    GgufWriter w;
    w.alignment(alignment).kv("general.architecture", gguf_string("llama"));
    w.tensor({"a", {3}, 0, ramp_f32(3), std::nullopt});
    w.tensor({"b", {5}, 0, ramp_f32(5), std::nullopt});
    const auto bytes = w.bytes();
    auto r = parse(bytes);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->alignment, alignment);
    EXPECT_EQ(r->data_offset % alignment, 0u);
    EXPECT_EQ(r->data_offset, w.data_offset());
    EXPECT_EQ(w.tensor_offsets()[1], alignment >= 16 ? alignment : 16u);
    EXPECT_EQ(r->tensors[1].data, bytes.data() + w.data_offset() + w.tensor_offsets()[1]);
  }
}

TEST(GgufReader, Version2AndEmptyFile) {
  GgufWriter w(2);
  auto r = parse(w.bytes());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->version, 2u);
  EXPECT_TRUE(r->tensors.empty());
  EXPECT_TRUE(r->metadata.all().empty());
}

TEST(GgufReader, ZeroSizedAndScalarTensors) {
  GgufWriter w;
  w.tensor({"empty", {0, 4}, 2, {}, std::nullopt});
  w.tensor({"scalar", {}, 0, ramp_f32(1), std::nullopt});
  const auto bytes = w.bytes();
  auto r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tensors[0].shape, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(r->tensors[0].n_bytes, 0u);
  EXPECT_TRUE(r->tensors[1].shape.empty());
  EXPECT_EQ(r->tensors[1].n_bytes, 4u);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deepinfer_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return p.string();
  }

  fs::path dir_;
};

using GgufFile = TempDir;

TEST_F(GgufFile, OpensThroughTensorSource) {
  const std::string path = write("tiny.gguf", sample_gguf_writer().bytes());
  using Open = Result<std::unique_ptr<TensorSource>> (*)(const std::string&);
  const Open through_source = [](const std::string& p) { return open_tensor_source(p); };
  for (Open open : {Open{open_gguf}, through_source}) {
    auto src = open(path);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    EXPECT_EQ((*src)->path(), path);
    EXPECT_EQ(*(*src)->metadata().get_string("general.architecture"), "llama");
    ASSERT_EQ((*src)->tensors().size(), 3u);
    auto t = (*src)->get("output_norm.weight");
    ASSERT_TRUE(t.ok());
    float last;
    std::memcpy(&last, (*t)->data + 28, 4);
    EXPECT_EQ(last, 7.0f);
    EXPECT_FALSE((*src)->get("nope").ok());
  }
}

TEST_F(GgufFile, MissingAndEmptyFilesNameThePath) {
  auto missing = open_gguf((dir_ / "absent.gguf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent.gguf"), std::string::npos);

  const std::string empty = write("empty.gguf", {});
  auto e = open_gguf(empty);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(e.status().message().rfind(empty + ": truncated", 0), 0u) << e.status().message();
}

// ---- damaged files -----------------------------------------------------------------------------

TEST(GgufDamaged, WrongMagic) {
  auto bytes = sample_gguf_writer().bytes();
  bytes[0] = 'P';
  bytes[3] = 0x01;
  const Status s = parse_error(bytes);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s, "not a GGUF file")) << s.message();
  EXPECT_TRUE(contains(s, "'PGU\\x01'")) << s.message();
}

TEST(GgufDamaged, UnsupportedVersions) {
  for (uint32_t version : {0u, 1u, 4u, 99u}) {
    const Status s = parse_error(GgufWriter(version).bytes());
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << version;
    EXPECT_TRUE(contains(s, "GGUF version " + std::to_string(version) + " is not supported")) << s.message();
  }
  const Status big_endian = parse_error(GgufWriter(0x03000000u).bytes());
  EXPECT_EQ(big_endian.code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(contains(big_endian, "big-endian")) << big_endian.message();
}

// Every proper prefix of a valid file is damaged: each must give an error, none may crash or
// read past the prefix (the bytes are copied so a sanitizer sees the end).
TEST(GgufDamaged, EveryTruncationIsAnError) {
  const auto bytes = sample_gguf_writer().bytes();
  ASSERT_TRUE(parse(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto r = parse(prefix);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << n << ": " << r.status().message();
    EXPECT_TRUE(contains(r.status(), "truncated")) << n << ": " << r.status().message();
    EXPECT_EQ(r.status().message().rfind(kName + ": ", 0), 0u) << r.status().message();
  }
}

TEST(GgufDamaged, TruncationMessagesNameTheItem) {
  GgufWriter w = sample_gguf_writer();
  const auto bytes = w.bytes();
  auto cut = [&](size_t n) { return parse_error(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n)).message(); };
  const std::string size_of = ", file size ";

  EXPECT_EQ(cut(20), kName + ": truncated: the header runs past the end of the file (offset 24, file size 20)");
  // Inside the name of tensor info 0: fewer bytes are left than 3 tensor infos need at least.
  const size_t info0 = w.infos_offset();
  EXPECT_EQ(cut(info0 + 10), kName + ": truncated: the file claims 3 tensor infos (at least 24 bytes each), but "
                                     "only 10 bytes are left at offset " + std::to_string(info0) + " (file size " +
                                     std::to_string(info0 + 10) + ")");
  // Inside the dims of tensor info 1: name, then n_dims, then the first dim.
  const size_t info1 = info0 + (8 + 22) + 4 + 2 * 8 + 4 + 8;
  const size_t dims1 = info1 + 8 + 19 + 4;
  EXPECT_EQ(cut(dims1 + 3), kName + ": truncated: tensor info 1 ('blk.0.attn_q.weight') runs past the end of the "
                                    "file (offset " + std::to_string(dims1 + 8) + size_of + std::to_string(dims1 + 3) +
                                    ")");
  // One byte short of the last tensor's data.
  EXPECT_EQ(cut(bytes.size() - 1), kName + ": truncated: tensor 'output_norm.weight' (32 bytes) runs past the end of "
                                           "the file (offset " + std::to_string(bytes.size()) + size_of +
                                           std::to_string(bytes.size() - 1) + ")");
}

TEST(GgufDamaged, TensorDataPastTheEnd) {
  GgufWriter w;
  w.tensor({"a", {8}, 0, ramp_f32(8), std::nullopt});
  w.tensor({"blk.1.attn_q.weight", {8}, 0, ramp_f32(8), uint64_t{1} << 20});
  auto bytes = w.bytes();
  bytes.resize(w.data_offset() + 64);
  const Status s = parse_error(bytes);
  EXPECT_TRUE(contains(s, "truncated: tensor 'blk.1.attn_q.weight' (32 bytes) runs past the end of the file"))
      << s.message();

  GgufWriter huge;
  huge.tensor({"x", {8}, 0, ramp_f32(8), std::numeric_limits<uint64_t>::max() / 32 * 32});
  const Status h = parse_error(huge.bytes());
  EXPECT_EQ(h.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(h, "tensor 'x'")) << h.message();
}

std::vector<uint8_t> one_tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type_id,
                                std::vector<uint8_t> data, std::optional<uint64_t> offset = std::nullopt) {
  GgufWriter w;
  w.tensor({name, std::move(dims), type_id, std::move(data), offset});
  return w.bytes();
}

TEST(GgufDamaged, UnknownTensorType) {
  const Status s = parse_error(one_tensor("x", {32}, 99, std::vector<uint8_t>(64)));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), kName + ": tensor 'x' has unknown type id 99");
  // Ids 4 and 5 (the removed Q4_2/Q4_3) are unknown too.
  EXPECT_EQ(parse_error(one_tensor("y", {32}, 4, std::vector<uint8_t>(64))).code(), StatusCode::kUnimplemented);
}

TEST(GgufDamaged, TooManyDimensions) {
  const Status s = parse_error(one_tensor("x", {1, 1, 1, 1, 1}, 0, ramp_f32(1)));
  EXPECT_TRUE(contains(s, "tensor info 0 ('x') has 5 dimensions; at most 4 are allowed")) << s.message();
  EXPECT_TRUE(parse(one_tensor("x", {1, 1, 1, 1}, 0, ramp_f32(1))).ok());
}

TEST(GgufDamaged, DimensionsThatOverflow) {
  const Status s = parse_error(one_tensor("x", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, {}));
  EXPECT_TRUE(contains(s, "overflows")) << s.message();
  const Status neg = parse_error(one_tensor("x", {uint64_t{1} << 63}, 0, {}));
  EXPECT_TRUE(contains(neg, "overflows")) << neg.message();
  // Element count fits but bytes do not: 2^62 f32 elements.
  const Status bytes = parse_error(one_tensor("x", {uint64_t{1} << 62}, 0, {}));
  EXPECT_EQ(bytes.code(), StatusCode::kDataLoss);
}

TEST(GgufDamaged, RowLengthNotAMultipleOfTheBlock) {
  const Status s = parse_error(one_tensor("x", {48, 2}, 2, std::vector<uint8_t>(64)));
  EXPECT_TRUE(contains(s, "has type q4_0 and rows of 48 elements, not a multiple of its block size 32"))
      << s.message();
}

TEST(GgufDamaged, MisalignedTensorOffset) {
  const Status s = parse_error(one_tensor("x", {4}, 0, ramp_f32(4), 8));
  EXPECT_TRUE(contains(s, "has data offset 8, not a multiple of the alignment 32")) << s.message();
}

TEST(GgufDamaged, DuplicateAndOverlappingTensors) {
  GgufWriter dup;
  dup.tensor({"x", {4}, 0, ramp_f32(4), std::nullopt}).tensor({"x", {4}, 0, ramp_f32(4), std::nullopt});
  const Status d = parse_error(dup.bytes());
  EXPECT_TRUE(contains(d, "tensor info 1 ('x'): duplicate tensor name")) << d.message();

  GgufWriter overlap;
  overlap.tensor({"a", {16}, 0, ramp_f32(16), 0}).tensor({"b", {4}, 0, ramp_f32(4), 32});
  const Status o = parse_error(overlap.bytes());
  EXPECT_TRUE(contains(o, "'a' and 'b' overlap")) << o.message();
}

TEST(GgufDamaged, DuplicateKey) {
  GgufWriter w;
  w.kv("general.name", gguf_string("a")).kv("general.name", gguf_string("b"));
  const Status s = parse_error(w.bytes());
  EXPECT_TRUE(contains(s, "metadata entry 1 ('general.name'): duplicate key")) << s.message();
}

TEST(GgufDamaged, BadAlignmentValues) {
  for (uint32_t a : {0u, 4u, 33u, 48u, 0x80000001u}) {
    GgufWriter w;
    w.kv("general.alignment", gguf_u32(a));
    const Status s = parse_error(w.bytes());
    EXPECT_TRUE(contains(s, "general.alignment is " + std::to_string(a) + "; it must be a power of two"))
        << s.message();
  }
  GgufWriter str;
  str.kv("general.alignment", gguf_string("32"));
  EXPECT_TRUE(contains(parse_error(str.bytes()), "general.alignment has type string"));
  GgufWriter neg;
  neg.kv("general.alignment", gguf_i32(-32));
  EXPECT_TRUE(contains(parse_error(neg.bytes()), "general.alignment is -32"));
  GgufWriter ok;
  ok.kv("general.alignment", gguf_u64(16));
  EXPECT_TRUE(parse(ok.bytes()).ok());
}

// Counts that cannot fit in the file are rejected before anything is allocated for them.
TEST(GgufDamaged, HugeCounts) {
  const uint64_t huge = uint64_t{1} << 60;
  GgufWriter kv;
  kv.kv("a", gguf_u8(1)).n_kv_override(huge);
  Status s = parse_error(kv.bytes());
  EXPECT_TRUE(contains(s, "truncated: the file claims 1152921504606846976 metadata entries")) << s.message();

  GgufWriter tensors;
  tensors.n_tensors_override(huge);
  s = parse_error(tensors.bytes());
  EXPECT_TRUE(contains(s, "1152921504606846976 tensor infos")) << s.message();

  GgufWriter array;
  array.kv("tokens", gguf_array(static_cast<uint32_t>(GgufType::kString), {gguf_string("a")}, huge));
  s = parse_error(array.bytes());
  EXPECT_TRUE(contains(s, "metadata entry 0 ('tokens') claims an array of 1152921504606846976 string values"))
      << s.message();

  GgufWriter nested;
  nested.kv("n", gguf_array(static_cast<uint32_t>(GgufType::kArray), {}, huge));
  EXPECT_TRUE(contains(parse_error(nested.bytes()), "claims an array of"));

  // A string length of 2^60: the key itself.
  auto bytes = GgufWriter().kv("abc", gguf_u8(1)).bytes();
  const uint64_t len = huge;
  std::memcpy(bytes.data() + 24, &len, 8);
  s = parse_error(bytes);
  EXPECT_TRUE(contains(s, "truncated: metadata entry 0 key (a string of 1152921504606846976 bytes)")) << s.message();

  // A string value of 2^64 - 1 bytes: the end offset overflows and is shown as a sum.
  auto value = GgufWriter().kv("k", gguf_string("v")).bytes();
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  std::memcpy(value.data() + 24 + 8 + 1 + 4, &max, 8);
  s = parse_error(value);
  EXPECT_TRUE(contains(s, "metadata entry 0 ('k') (a string of 18446744073709551615 bytes)")) << s.message();
}

TEST(GgufDamaged, BadValueTypes) {
  GgufWriter w;
  w.kv("weird", GgufValue{13, {0, 0, 0, 0}});
  EXPECT_TRUE(contains(parse_error(w.bytes()), "metadata entry 0 ('weird') has unknown value type 13"));

  GgufWriter arr;
  arr.kv("weird_array", gguf_array(77u, {}));
  EXPECT_TRUE(contains(parse_error(arr.bytes()), "is an array of unknown value type 77"));

  GgufWriter b;
  b.kv("flag", GgufValue{static_cast<uint32_t>(GgufType::kBool), {2}});
  EXPECT_TRUE(contains(parse_error(b.bytes()), "bool value 2 is neither 0 nor 1"));
}

TEST(GgufDamaged, NestingTooDeep) {
  GgufValue v = gguf_array(GgufType::kU8, {gguf_u8(1)});
  for (int depth = 1; depth < kGgufMaxArrayDepth; ++depth) v = gguf_array(GgufType::kArray, {v});
  GgufWriter ok;
  ok.kv("deep", v);
  EXPECT_TRUE(parse(ok.bytes()).ok());  // exactly the limit
  GgufWriter too_deep;
  too_deep.kv("deep", gguf_array(GgufType::kArray, {v}));
  EXPECT_TRUE(contains(parse_error(too_deep.bytes()), "arrays nested more than 8 deep"));
}

TEST(GgufDamaged, MetadataErrorsNameTheItem) {
  // Header (24), key (8 + 21), value type (4), element type (4), count (8): items start at 69.
  const size_t items = 24 + 8 + 21 + 4 + 4 + 8;
  GgufWriter floats;
  floats.kv("tokenizer.ggml.scores", gguf_array(GgufType::kF32, {gguf_f32(1), gguf_f32(2), gguf_f32(3)}));
  auto bytes = floats.bytes();
  bytes.resize(items + 10);
  EXPECT_EQ(parse_error(bytes).message(),
            kName + ": truncated: metadata entry 0 ('tokenizer.ggml.scores') claims an array of 3 float32 values, "
                    "which cannot fit in the 10 bytes left at offset 69 (file size 79)");

  // Strings pass the size bound (8 bytes each at least) but the third one is cut.
  GgufWriter strings;
  strings.kv("tokenizer.ggml.tokens",
             gguf_array(GgufType::kString, {gguf_string("aaaa"), gguf_string("bbbb"), gguf_string("cccc")}));
  bytes = strings.bytes();
  bytes.resize(items + 24 + 8 + 2);
  EXPECT_EQ(parse_error(bytes).message(),
            kName + ": truncated: metadata entry 0 ('tokenizer.ggml.tokens') item 2 (a string of 4 bytes) runs past "
                    "the end of the file (offset " + std::to_string(items + 36) + ", file size " +
                    std::to_string(items + 34) + ")");

  // Nested: the item path shows both levels.
  GgufWriter nested;
  nested.kv("tokenizer.ggml.tokens",
            gguf_array(GgufType::kArray, {gguf_array(GgufType::kString, {gguf_string("a")}),
                                          gguf_array(GgufType::kString, {gguf_string("bcdefghijkl")})}));
  bytes = nested.bytes();
  bytes.resize(nested.infos_offset() - 3);  // the metadata ends where the (absent) infos start
  EXPECT_TRUE(contains(parse_error(bytes), "('tokenizer.ggml.tokens') item 1 item 0 (a string of 11 bytes)"));
}

}  // namespace
}  // namespace deepinfer
