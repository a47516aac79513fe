// Op tests of the packed weight layout and its kernels (backend/cpu/packed.h): packing loses
// nothing (unpacking gives the stored bytes back), the packed matrix product agrees with the
// scalar reference on the original rows within the float-summation bound, every element is
// the same bit for bit whatever tokens and groups share its tile (for each instruction-set tier
// this CPU runs: AVX-512 VNNI and AVX2 tiles read the same layout; where both run, their results
// are the same bits), and models' matmul and row lookups through a packed matrix equal or
// approximate the unpacked ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../unit/backend/quant_test_util.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"

namespace deepinfer::cpu {
namespace {

using testing::dot_double;
using testing::random_floats;
using testing::random_row;

constexpr DType kPackedTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                                  DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                                  DType::kMXFP4, DType::kF32, DType::kF16,  DType::kBF16};

int64_t block_elements(DType type) { return dtype_traits(type)->block_size; }
bool is_k_quant(DType type) { return block_elements(type) == 256; }
bool is_float(DType type) { return block_elements(type) == 1; }
// Products in float chains over float activations (the float formats, MXFP4), not integer sums.
bool float_chains(DType type) { return vec_dot_type(type) == DType::kF32; }
// Whether a type's packed product takes PackedActInfo: the 32-element integer formats'.
bool takes_infos(DType type) { return block_elements(type) == 32 && !float_chains(type); }

std::vector<uint8_t> random_matrix(DType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  std::vector<uint8_t> w;
  for (int64_t o = 0; o < n_out; ++o) {
    const std::vector<uint8_t> row = random_row(type, n_in, rng);
    w.insert(w.end(), row.begin(), row.end());
  }
  return w;
}

std::vector<uint8_t> packed_copy(DType type, const std::vector<uint8_t>& w, int64_t n_out, int64_t n_in) {
  std::vector<uint8_t> p(packed_group_bytes(type, n_in) * static_cast<size_t>(n_out / kPackRows), 0xEE);
  pack_matrix(type, w.data(), n_out, n_in, p.data());
  return p;
}

TEST(PackedKernels, PackingIsLossless) {
  std::mt19937 rng(3);
  for (DType type : kPackedTypes) {
    ASSERT_TRUE(has_packed_layout(type));
    // Floats: past the packer's 64-element runs and the row lookup's 256-element ones.
    const int64_t n_out = 48, n_in = is_float(type) ? 300 : 3 * block_elements(type);
    const std::vector<uint8_t> w = random_matrix(type, n_out, n_in, rng);
    const std::vector<uint8_t> p = packed_copy(type, w, n_out, n_in);
    // As large as the original, except Q3_K, Q4_K and Q5_K, whose 6-bit scales are unpacked to
    // bytes (64 more bytes per 16 super-blocks).
    const bool bytes_scales = type == DType::kQ3_K || type == DType::kQ4_K || type == DType::kQ5_K;
    const size_t grown = bytes_scales ? 64 * static_cast<size_t>(n_out / 16) * 3 : 0;
    EXPECT_EQ(p.size(), w.size() + grown) << dtype_name(type);
    const size_t row_bytes = dtype_row_bytes(type, n_in);
    std::vector<uint8_t> row(row_bytes);
    std::vector<float> want(n_in), got(n_in);
    for (int64_t o = 0; o < n_out; ++o) {
      unpack_row(type, p.data(), n_in, o, row.data());
      ASSERT_EQ(std::memcmp(row.data(), w.data() + o * row_bytes, row_bytes), 0) << dtype_name(type) << " row " << o;
      dequantize_row(type, w.data() + o * row_bytes, want.data(), n_in);
      dequantize_packed_row(type, p.data(), n_in, o, got.data());
      for (int64_t i = 0; i < n_in; ++i) ASSERT_EQ(fp32_to_bits(got[i]), fp32_to_bits(want[i])) << dtype_name(type);
    }
  }
}

// The packed products of one instruction-set tier, by name.
struct Tier {
  Isa isa;
  PackedGemmFn (*gemm_fn)(DType);
  PackedActInfoFn (*info_fn)(DType);
};
constexpr Tier kTiers[] = {{Isa::kAvx512, avx512::packed_gemm_fn, avx512::packed_act_info_fn},
                           {Isa::kAvx2, avx2::packed_gemm_fn, avx2::packed_act_info_fn}};

void PrintTo(const Tier& tier, std::ostream* os) { *os << isa_name(tier.isa); }

bool runs_here(const Tier& tier) { return tier.gemm_fn(DType::kQ4_0) != nullptr && cpu_has(tier.isa); }

class PackedTier : public ::testing::TestWithParam<Tier> {
 protected:
  void SetUp() override {
    if (!runs_here(GetParam())) {
      GTEST_SKIP() << "no " << isa_name(GetParam().isa) << " on this CPU (or compiler): its packed kernels do not run here";
    }
  }
};

// The packed product against the reference dot of the original rows, and each element equal to
// its value computed alone (one group, one token) bit for bit.
TEST_P(PackedTier, ProductMatchesTheReferenceAndIsTileInvariant) {
  std::mt19937 rng(11);
  for (DType type : kPackedTypes) {
    const PackedGemmFn gemm = GetParam().gemm_fn(type);
    ASSERT_NE(gemm, nullptr) << dtype_name(type);
    const DType act_type = vec_dot_type(type);
    // {groups, tokens, blocks}: tile remainders in both directions, one block, odd counts.
    // Token counts past 8 cross every tile width (8, 6 and 4 tokens, then one at a time).
    // {5, 17, 300}: the prefill paths of Q5_0, Q3_K and Q6_K unpack a call's groups into a
    // scratch of 256 KB at most: two groups at a time, then the fifth alone (Q5_0); one at a time
    // (Q3_K, Q6_K). {3, 26, 2} and {2, 34, 1}: one-pass products that Q5_0 (24 tokens and more),
    // Q3_K and Q6_K (32 and more) unpack as prefill does.
    // Two or three tokens left after the wider tiles (7, 9, 10, 26, 34 for some width; 2 and 3
    // alone) go through 4-token tiles over a zero-padded copy, except where a row of 6 and the two
    // past it make two rows of 4 (8, 14 and 26 tokens for 6-token tiles). One-pass products of 2 to 8 rows of
    // tiles go group by group (13, 17, 26, 45 tokens), more rows row by row (47, and 70 in two
    // calls of at most 64 tokens).
    const int64_t shapes[][3] = {{1, 1, 1},  {1, 5, 3},  {3, 1, 2},   {2, 4, 18}, {5, 7, 1},  {4, 9, 19},
                                 {3, 13, 5}, {3, 10, 4}, {2, 17, 2},  {5, 17, 300}, {3, 26, 2}, {2, 34, 1},
                                 {2, 2, 3},  {3, 3, 2},   {5, 45, 1}, {3, 47, 2}, {2, 70, 1}, {3, 8, 2},
                                 {2, 14, 3}};
    for (const auto& s : shapes) {
      // K-quant blocks are 8 times longer: fewer of them. Float blocks are one element: 32 times
      // more of them, so that chains cross the float tiles' 256-element blocks.
      const int64_t blocks = is_k_quant(type) ? (s[2] + 3) / 4 : is_float(type) ? 32 * s[2] + s[0] : s[2];
      const int64_t groups = s[0], toks = s[1], n = block_elements(type) * blocks, rows = groups * kPackRows;
      const std::vector<uint8_t> w = random_matrix(type, rows, n, rng);
      const std::vector<uint8_t> p = packed_copy(type, w, rows, n);
      const size_t w_row = dtype_row_bytes(type, n), a_row = dtype_row_bytes(act_type, n);
      const size_t a_stride = a_row + 8;  // padding: strides differ from row sizes
      std::vector<uint8_t> a(a_stride * toks, 0x5A);
      std::vector<std::vector<float>> a_f, w_f;
      for (int64_t t = 0; t < toks; ++t) {
        const std::vector<float> x = random_floats(n, rng, 2.0f);
        ref::quantize_row(act_type, x.data(), a.data() + t * a_stride, n);
        a_f.emplace_back(n);
        ref::dequantize_row(act_type, a.data() + t * a_stride, a_f.back().data(), n);
      }
      for (int64_t r = 0; r < rows; ++r) {
        w_f.emplace_back(n);
        ref::dequantize_row(type, w.data() + r * w_row, w_f.back().data(), n);
      }
      const size_t group_bytes = packed_group_bytes(type, n);
      const int64_t ldy = rows + 3;
      std::vector<float> y(toks * ldy, -1.0f), alone(kPackRows);
      // The infos are worked out once for every token; each one-token call below gets its row's.
      const PackedActInfoFn info_fn = GetParam().info_fn(type);
      ASSERT_EQ(info_fn != nullptr, takes_infos(type)) << dtype_name(type);
      const int64_t infos_per_row = n / kPackedActBlock;
      std::vector<PackedActInfo> infos(static_cast<size_t>(toks * infos_per_row));
      if (info_fn != nullptr) info_fn(a.data(), a_stride, toks, n, infos.data());
      const PackedActInfo* info = info_fn != nullptr ? infos.data() : nullptr;
      // As several passes (prefill: Q5_0, Q5_K and Q6_K unpack; every product goes row by row)
      // and as one pass (decode: where weights are prefetched, 2 to 8 rows of tiles go group by
      // group; ctest runs this suite with DEEPINFER_WEIGHT_PREFETCH=0 and =1 on any CPU).
      for (const bool one_pass : {false, true}) {
        std::fill(y.begin(), y.end(), -1.0f);
        gemm(p.data(), group_bytes, groups, a.data(), a_stride, info, toks, n, y.data(), ldy, one_pass);
        for (int64_t t = 0; t < toks; ++t) {
          const PackedActInfo* row_info = info != nullptr ? info + t * infos_per_row : nullptr;
          for (int64_t g = 0; g < groups; ++g) {
            gemm(p.data() + g * group_bytes, group_bytes, 1, a.data() + t * a_stride, a_stride, row_info, 1, n,
                 alone.data(), kPackRows, false);
            for (int64_t j = 0; j < kPackRows; ++j) {
              const int64_t r = g * kPackRows + j;
              const std::string where = std::string(dtype_name(type)) + " groups=" + std::to_string(groups) +
                                        " toks=" + std::to_string(toks) + " n=" + std::to_string(n) +
                                        " one_pass=" + std::to_string(one_pass) + " at (" + std::to_string(r) + "," +
                                        std::to_string(t) + ")";
              const float got = y[t * ldy + r];
              ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(alone[j])) << where;
              const float want = ref::vec_dot(type, w.data() + r * w_row, a.data() + t * a_stride, n);
              if (is_k_quant(type)) {
                // Exact integer sums scaled with the reference's float operations: the same bits.
                ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(want)) << where;
              } else if (float_chains(type)) {
                // One chain of n roundings against the reference's own sum.
                const double bound = (2.0 * n + 16) * 0x1p-24 * dot_double(w_f[r], a_f[t]).magnitude + 1e-30;
                ASSERT_NEAR(got, want, bound) << where;
              } else {
                // One rounding per block scaling (and min term) plus the reference's own.
                const double bound = (2.0 * blocks + 16) * 0x1p-24 * dot_double(w_f[r], a_f[t]).magnitude + 1e-30;
                ASSERT_NEAR(got, want, bound) << where;
              }
            }
          }
          for (int64_t r = rows; r < ldy; ++r) EXPECT_EQ(y[t * ldy + r], -1.0f) << "padding written";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, PackedTier, ::testing::ValuesIn(kTiers),
                         [](const ::testing::TestParamInfo<Tier>& info) { return std::string(isa_name(info.param.isa)); });

// Where both tiers run (an AVX-512 VNNI CPU), the AVX2 tiles give the AVX-512 tiles' bits: the
// same integer sums and the same float operations per lane, in every tile shape.
TEST(PackedKernels, TheAvx2TilesGiveTheAvx512Bits) {
  if (!runs_here(kTiers[0]) || !runs_here(kTiers[1])) {
    GTEST_SKIP() << "needs both AVX-512 VNNI and AVX2 on this CPU";
  }
  std::mt19937 rng(5);
  for (DType type : kPackedTypes) {
    const DType act_type = vec_dot_type(type);
    const int64_t groups = 3, toks = 41, n = 4 * block_elements(type), rows = groups * kPackRows;
    const std::vector<uint8_t> w = random_matrix(type, rows, n, rng);
    const std::vector<uint8_t> p = packed_copy(type, w, rows, n);
    const size_t a_row = dtype_row_bytes(act_type, n);
    std::vector<uint8_t> a(a_row * toks);
    for (int64_t t = 0; t < toks; ++t) {
      const std::vector<float> x = random_floats(n, rng, 2.0f);
      ref::quantize_row(act_type, x.data(), a.data() + t * a_row, n);
    }
    std::vector<PackedActInfo> infos(static_cast<size_t>(toks * (n / kPackedActBlock)));
    std::vector<float> y512(toks * rows), y2(toks * rows);
    for (const bool one_pass : {false, true}) {
      for (auto [tier, y] : {std::pair{kTiers[0], &y512}, std::pair{kTiers[1], &y2}}) {
        const PackedActInfoFn info_fn = tier.info_fn(type);
        if (info_fn != nullptr) info_fn(a.data(), a_row, toks, n, infos.data());
        tier.gemm_fn(type)(p.data(), packed_group_bytes(type, n), groups, a.data(), a_row,
                           info_fn != nullptr ? infos.data() : nullptr, toks, n, y->data(), rows, one_pass);
      }
      for (size_t e = 0; e < y2.size(); ++e) {
        ASSERT_EQ(fp32_to_bits(y2[e]), fp32_to_bits(y512[e])) << dtype_name(type) << " element " << e;
      }
    }
  }
}

// A packed matrix through the public entry points: matmul on two threads is batch invariant and
// close to the unpacked product (which another tier's kernels compute), and gather_rows reads the
// packed copy exactly as the original.
TEST(PackedKernels, MatmulAndGatherThroughAPackedMatrix) {
  std::mt19937 rng(9);
  ThreadPool pool(2);
  QuantScratch scratch;
  int packed = 0;
  for (DType type : kPackedTypes) {
    const int64_t n_in = 2 * 256, n_out = 5 * kPackRows, n_tok = 70;
    const std::vector<uint8_t> w = random_matrix(type, n_out, n_in, rng);
    const WeightMatrix plain{type, w.data(), n_out, n_in};
    WeightMatrix m = plain;
    PackedWeights packs;
    packs.pack(m);
    if (!packable(type, n_out, n_in)) {
      EXPECT_EQ(m.packed, nullptr);
      continue;
    }
    ASSERT_NE(m.packed, nullptr);
    EXPECT_EQ(packs.bytes(), packed_group_bytes(type, n_in) * (n_out / kPackRows));
    ++packed;
    const std::vector<float> x = random_floats(n_tok * n_in, rng);
    const std::vector<float> bias = random_floats(n_out, rng);
    std::vector<float> batched(n_tok * n_out), alone(n_out), reference(n_tok * n_out);
    matmul(m, x.data(), n_tok, batched.data(), bias.data(), scratch, pool);
    matmul(plain, x.data(), n_tok, reference.data(), bias.data(), scratch, pool);
    for (int64_t t = 0; t < n_tok; ++t) {
      matmul(m, x.data() + t * n_in, 1, alone.data(), bias.data(), scratch, pool);
      for (int64_t o = 0; o < n_out; ++o) {
        ASSERT_EQ(fp32_to_bits(batched[t * n_out + o]), fp32_to_bits(alone[o])) << dtype_name(type);
        ASSERT_NEAR(batched[t * n_out + o], reference[t * n_out + o], 1e-4 * (1 + std::fabs(reference[t * n_out + o])))
            << dtype_name(type) << " token " << t << " row " << o;
      }
    }
    const std::vector<int32_t> ids = {0, 17, 79, 16, 15, 42};
    std::vector<float> from_packed(ids.size() * n_in), from_plain(ids.size() * n_in);
    gather_rows(m, ids, from_packed.data());
    gather_rows(plain, ids, from_plain.data());
    EXPECT_EQ(std::memcmp(from_packed.data(), from_plain.data(), from_plain.size() * sizeof(float)), 0);
  }
  if (packed == 0) GTEST_SKIP() << "the dispatched kernel tier packs no format on this CPU";
}

}  // namespace
}  // namespace deepinfer::cpu
