// The GGUF reader and the CPU block formats on the real model files of the cache directory
// (${XDG_CACHE_HOME:-~/.cache}/deepinfer/models). CI's setup pulls them, so a missing file is
// a failure that says how to fetch it. Facts checked against gguf-py's reader: architecture,
// block count, tensor count and types, the data section's offset, token_embd's shape.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "backend/cpu/quant.h"
#include "core/mapped_file.h"
#include "model/loader/gguf.h"
#include "model/loader/gguf_parse.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

fs::path models_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path cache = xdg && *xdg ? fs::path(xdg) : fs::path(home ? home : ".") / ".cache";
  return cache / "deepinfer" / "models";
}

struct ModelFacts {
  std::string file;
  std::string pull_name;
  std::string architecture;
  uint64_t block_count;
  size_t n_tensors;
  int64_t n_vocab, n_embd;
  uint64_t data_offset;
  std::map<DType, int> type_counts;
};

const ModelFacts kSmolLM2{"SmolLM2-135M-Instruct.Q4_1.gguf",
                          "smollm2-135m-instruct",
                          "llama",
                          30,
                          272,
                          49152,
                          576,
                          1785664,
                          {{DType::kQ4_1, 210}, {DType::kF32, 61}, {DType::kQ8_0, 1}}};

const ModelFacts kGemma3{"gemma-3-270m-q4_k_m.gguf",
                         "gemma3-270m",
                         "gemma3",
                         18,
                         236,
                         262144,
                         640,
                         6525120,
                         {{DType::kF32, 109}, {DType::kQ5_0, 81}, {DType::kQ4_K, 27}, {DType::kQ8_0, 10}, {DType::kQ6_K, 9}}};

class RealGguf : public ::testing::TestWithParam<ModelFacts> {
 protected:
  void SetUp() override {
    path_ = (models_dir() / GetParam().file).string();
    ASSERT_TRUE(fs::exists(path_)) << "model file missing: " << path_ << "\nrun `deepinfer pull "
                                   << GetParam().pull_name << "` (CI's setup script does this)";
  }
  std::string path_;
};

TEST_P(RealGguf, HeaderMetadataAndTensors) {
  const ModelFacts& f = GetParam();
  auto src = open_gguf(path_);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const Metadata& m = (*src)->metadata();
  EXPECT_EQ(*m.get_string("general.architecture"), f.architecture);
  EXPECT_EQ(*m.get_uint(f.architecture + ".block_count"), f.block_count);
  EXPECT_EQ(*m.get_uint(f.architecture + ".embedding_length"), static_cast<uint64_t>(f.n_embd));
  EXPECT_EQ(m.get_string_array("tokenizer.ggml.tokens")->size(), static_cast<size_t>(f.n_vocab));

  const auto& tensors = (*src)->tensors();
  EXPECT_EQ(tensors.size(), f.n_tensors);
  std::map<DType, int> counts;
  for (const TensorView& t : tensors) ++counts[t.dtype];
  EXPECT_EQ(counts, f.type_counts);

  auto embd = (*src)->get("token_embd.weight");
  ASSERT_TRUE(embd.ok());
  EXPECT_EQ((*embd)->shape, (std::vector<int64_t>{f.n_vocab, f.n_embd}));
  EXPECT_EQ((*embd)->dtype, DType::kQ8_0);
  EXPECT_EQ((*embd)->n_bytes, static_cast<size_t>(f.n_vocab) * (f.n_embd / 32) * 34);
}

TEST_P(RealGguf, DataSectionWhereGgufPyPutsIt) {
  auto file = MappedFile::open(path_);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto contents = parse_gguf(file->bytes(), path_);
  ASSERT_TRUE(contents.ok()) << contents.status().to_string();
  EXPECT_EQ(contents->version, 3u);
  EXPECT_EQ(contents->alignment, 32u);
  EXPECT_EQ(contents->data_offset, GetParam().data_offset);
  for (const TensorView& t : contents->tensors) {
    EXPECT_GE(t.data, file->data() + contents->data_offset) << t.name;
    EXPECT_LE(t.data + t.n_bytes, file->data() + file->size()) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u) << t.name;
  }
}

// Every tensor's first row dequantizes to finite values, and every matrix's first rows dot a
// random activation as its dequantized floats do (the dispatched, usually SIMD, kernels on
// real weights).
TEST_P(RealGguf, RowsDequantizeAndDot) {
  auto src = open_gguf(path_);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int n_dots = 0;
  for (const TensorView& t : (*src)->tensors()) {
    ASSERT_TRUE(cpu::quant_supported(t.dtype)) << t.name;
    const int64_t n = t.row_length();
    std::vector<float> row(static_cast<size_t>(n));
    cpu::dequantize_row(t.dtype, t.data, row.data(), n);
    for (float v : row) ASSERT_TRUE(std::isfinite(v)) << t.name;
    if (t.shape.size() != 2) continue;

    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    const DType act_type = cpu::vec_dot_type(t.dtype);
    std::vector<uint8_t> act(dtype_row_bytes(act_type, n));
    cpu::quantize_row(act_type, x.data(), act.data(), n);
    std::vector<float> x_q(static_cast<size_t>(n));
    cpu::dequantize_row(act_type, act.data(), x_q.data(), n);
    for (int64_t r = 0; r < std::min<int64_t>(4, t.n_rows()); ++r) {
      const uint8_t* w = t.data + r * t.row_bytes();
      cpu::dequantize_row(t.dtype, w, row.data(), n);
      double want = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        want += static_cast<double>(row[i]) * x_q[i];
        magnitude += std::fabs(static_cast<double>(row[i]) * x_q[i]);
      }
      // Q4_1's min term goes through Q8_1's half-precision s; allow for it.
      const double tol = (t.dtype == DType::kQ4_1 ? 2e-3 : 1e-5) * magnitude + 1e-6;
      EXPECT_NEAR(cpu::vec_dot(t.dtype, w, act.data(), n), want, tol) << t.name << " row " << r;
      ++n_dots;
    }
  }
  EXPECT_GT(n_dots, 100);
}

INSTANTIATE_TEST_SUITE_P(Models, RealGguf, ::testing::Values(kSmolLM2, kGemma3),
                         [](const auto& info) { return info.param.architecture == "llama" ? "SmolLM2" : "Gemma3"; });

}  // namespace
}  // namespace deepinfer
