// Dequantization against gguf-py's numpy implementation: tests/golden/quant/<type>.txt holds
// random blocks and the floats gguf.quants.dequantize made of them
// (tools/golden/make_quant_vectors.py regenerates them).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"

namespace deepinfer::cpu {
namespace {

struct GoldenQuant {
  std::string type_name;
  int64_t n_blocks = 0;
  size_t block_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

// Fails the test (and returns false) on a malformed file.
bool read_golden(const std::filesystem::path& path, GoldenQuant& out) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "cannot open " << path;
    return false;
  }
  std::string line, hex;
  bool in_values = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    if (in_values) {
      std::string v;
      while (fields >> v) out.values.push_back(std::strtof(v.c_str(), nullptr));
      continue;
    }
    std::string key;
    fields >> key;
    if (key == "type") fields >> out.type_name;
    else if (key == "n_blocks") fields >> out.n_blocks;
    else if (key == "block_bytes") fields >> out.block_bytes;
    else if (key == "bytes") fields >> hex;
    else if (key == "values") in_values = true;
    else {
      ADD_FAILURE() << path << ": unexpected line '" << line << "'";
      return false;
    }
  }
  if (hex.size() % 2 != 0) {
    ADD_FAILURE() << path << ": odd hex length";
    return false;
  }
  for (size_t i = 0; i < hex.size(); i += 2) {
    out.bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return true;
}

DType dtype_from_name(const std::string& name) {
  for (uint32_t id = 0; id < 64; ++id) {
    const auto type = dtype_from_ggml_id(id);
    if (type && dtype_name(*type) == name) return *type;
  }
  ADD_FAILURE() << "unknown type name " << name;
  return DType::kF32;
}

class QuantGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGolden, DequantizeMatchesGgufPy) {
  const auto path = std::filesystem::path(DEEPINFER_TEST_DATA) / "golden" / "quant" / (GetParam() + ".txt");
  GoldenQuant g;
  ASSERT_TRUE(read_golden(path, g));
  ASSERT_EQ(g.type_name, GetParam());
  const DType type = dtype_from_name(g.type_name);
  const auto traits = dtype_traits(type);
  ASSERT_EQ(g.block_bytes, traits->block_bytes);
  ASSERT_EQ(g.bytes.size(), g.block_bytes * static_cast<size_t>(g.n_blocks));
  const int64_t n = g.n_blocks * traits->block_size;
  ASSERT_EQ(static_cast<int64_t>(g.values.size()), n);

  std::vector<float> got(static_cast<size_t>(n)), got_ref(static_cast<size_t>(n));
  dequantize_row(type, g.bytes.data(), got.data(), n);
  ref::dequantize_row(type, g.bytes.data(), got_ref.data(), n);
  float scale = 0.0f;
  for (float v : g.values) scale = std::max(scale, std::fabs(v));
  for (int64_t i = 0; i < n; ++i) {
    // Same float operations in the same order as numpy; the margin only covers a compiler
    // that fuses a multiply and a subtract.
    EXPECT_NEAR(got[i], g.values[i], 1e-6f * scale) << g.type_name << " element " << i;
    EXPECT_EQ(got[i], got_ref[i]) << g.type_name << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantGolden,
                         ::testing::Values("f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K",
                                           "q4_K", "q5_K", "q6_K"));

}  // namespace
}  // namespace deepinfer::cpu
