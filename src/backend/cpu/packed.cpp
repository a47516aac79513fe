#include "backend/cpu/packed.h"
#include "backend/cpu/packed_layout.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "core/check.h"

namespace deepinfer::cpu {

namespace {

constexpr int kGroups4 = 4;   // 64-byte code vectors of a 4-bit packed block
constexpr int kGroups8 = 8;   // of a Q8_0 packed block
using namespace packed_layout;  // NOLINT(google-build-using-namespace): the layouts' offsets
static_assert(kQ6KBytes == kPackRows * sizeof(BlockQ6_K) && kQ2KBytes == kPackRows * sizeof(BlockQ2_K));

// Inverse of unpack_q4_k_scales (quant_kernels.h): 8 + 8 six-bit values -> 12 bytes.
void pack_q4_k_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* packed) {
  for (int k = 0; k < 4; ++k) {
    packed[k] = static_cast<uint8_t>(sc[k] | ((sc[k + 4] >> 4) << 6));
    packed[k + 4] = static_cast<uint8_t>(mn[k] | ((mn[k + 4] >> 4) << 6));
    packed[k + 8] = static_cast<uint8_t>((sc[k + 4] & 15) | ((mn[k + 4] & 15) << 4));
  }
}

// Inverse of unpack_q3_k_scales (quant_kernels.h): 16 scales in [-32, 31] -> 12 bytes.
void pack_q3_k_scales(const int8_t* sc, uint8_t* packed) {
  std::memset(packed, 0, 12);
  for (int k = 0; k < 16; ++k) {
    const int v = sc[k] + 32;
    packed[k % 8] = static_cast<uint8_t>(packed[k % 8] | (v & 15) << (k < 8 ? 0 : 4));
    packed[8 + k % 4] = static_cast<uint8_t>(packed[8 + k % 4] | (v >> 4) << (2 * (k / 4)));
  }
}

// The largest stored block with a packed layout (scratch for one row's block).
constexpr size_t kMaxStoredBlock = sizeof(BlockQ6_K);

// Bytes of one packed block (16 rows' block i); 0 for a type without a packed layout.
size_t packed_block_bytes(DType type) {
  switch (type) {
    case DType::kQ4_0: return kPackRows * sizeof(BlockQ4_0);
    case DType::kQ4_1: return kPackRows * sizeof(BlockQ4_1);
    case DType::kQ5_0: return kPackRows * sizeof(BlockQ5_0);
    case DType::kQ5_1: return kPackRows * sizeof(BlockQ5_1);
    case DType::kQ8_0: return kPackRows * sizeof(BlockQ8_0);
    case DType::kQ2_K: return kQ2KBytes;
    case DType::kQ3_K: return kQ3KBytes;
    case DType::kQ4_K: return kQ4KBytes;
    case DType::kQ5_K: return kQ5KBytes;
    case DType::kQ6_K: return kQ6KBytes;
    case DType::kMXFP4: return kMxfp4Bytes;
    case DType::kF32: return kPackRows * sizeof(float);
    case DType::kF16:
    case DType::kBF16: return kPackRows * sizeof(uint16_t);
    default: return 0;
  }
}

bool is_float(DType type) { return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16; }

// Elements per block of a type with a packed layout.
int64_t block_elements(DType type) { return dtype_traits(type)->block_size; }

// The stored block's bytes (a packed Q3_K, Q4_K or Q5_K block is larger than 16 stored ones: its
// 6-bit scales are unpacked to bytes).
size_t stored_block_bytes(DType type) {
  if (type == DType::kQ3_K) return sizeof(BlockQ3_K);
  if (type == DType::kQ4_K) return sizeof(BlockQ4_K);
  if (type == DType::kQ5_K) return sizeof(BlockQ5_K);
  return packed_block_bytes(type) / kPackRows;
}
static_assert(sizeof(BlockQ3_K) <= kMaxStoredBlock && sizeof(BlockQ4_K) <= kMaxStoredBlock &&
              sizeof(BlockQ5_K) <= kMaxStoredBlock && sizeof(BlockQ8_0) <= kMaxStoredBlock);

// n bytes between a stored block's field and its place in a packed block, in the direction
// to_packed picks, so packing and unpacking cannot disagree about the layout.
void move_bytes(void* stored, uint8_t* packed, size_t n, bool to_packed) {
  to_packed ? std::memcpy(packed, stored, n) : std::memcpy(stored, packed, n);
}

// Q4_K (layout in packed.h): d, dmin, sc[8][16], mn[8][16], codes[4][8][64]; Q5_K's fields
// of the same names are laid out alike.
template <typename Block>
void move_q4_k(Block& b, uint8_t* pb, int j, bool to_packed) {
  move_bytes(&b.d, pb + 2 * j, 2, to_packed);
  move_bytes(&b.dmin, pb + kHalves + 2 * j, 2, to_packed);
  uint8_t sc[8], mn[8];
  if (to_packed) unpack_q4_k_scales(b.scales, sc, mn);
  for (int s = 0; s < 8; ++s) {
    move_bytes(&sc[s], pb + kQ4KSc + kPackRows * s + j, 1, to_packed);
    move_bytes(&mn[s], pb + kQ4KMn + kPackRows * s + j, 1, to_packed);
  }
  if (!to_packed) pack_q4_k_scales(sc, mn, b.scales);
  uint8_t* codes = pb + kQ4KCodes;
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 8; ++l) {
      move_bytes(b.qs + 32 * chunk + 4 * l, codes + 512 * chunk + 64 * l + 4 * j, 4, to_packed);
    }
  }
}

// Q5_K (layout in packed.h): Q4_K's fields, then high[8][64]: byte 4j + b of high[L] is row j's
// qh[4L + b], whose bit s is the fifth bit of element 32s + 4L + b (k-group L of sub-block s).
void move_q5_k(BlockQ5_K& b, uint8_t* pb, int j, bool to_packed) {
  move_q4_k(b, pb, j, to_packed);
  for (int l = 0; l < 8; ++l) move_bytes(b.qh + 4 * l, pb + kQ5KHigh + 64 * l + 4 * j, 4, to_packed);
}

// Q6_K (layout in packed.h): d[16], sc[16][16], low[32][64], high[16][64]. Element e of the
// super-block is k-group G = e / 4, position b = e % 4: its low 4 bits are nibble G / 32 of
// low[G % 32][4j + b], its high 2 bits are bits 2(G / 16).. of high[G % 16][4j + b]. In the
// stored block (quant_blocks.h) e = 128h + 32s + l takes its low bits from nibble s / 2 of
// ql[64h + 32(s % 2) + l] and its high bits from bits 2s.. of qh[32h + l].
//
// Packing (a model's load) goes through the codes as bytes: each output byte written once, not
// or-ed in 256 times at variable shifts (that loop was 37% of loading a Llama-1B-shaped
// Q4_K_M file, whose output head is Q6_K).
void pack_q6_k_codes(const BlockQ6_K& b, uint8_t* low, uint8_t* high, int j) {
  uint8_t q[kQKK];
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int lo = (b.ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 15;
        const int hi = (b.qh[32 * h + l] >> (2 * s)) & 3;
        q[128 * h + 32 * s + l] = static_cast<uint8_t>(lo | hi << 4);
      }
    }
  }
  for (int group = 0; group < 32; ++group) {
    for (int pos = 0; pos < 4; ++pos) {
      const int e = 4 * group + pos;
      low[64 * group + 4 * j + pos] = static_cast<uint8_t>((q[e] & 15) | (q[128 + e] & 15) << 4);
    }
  }
  for (int group = 0; group < 16; ++group) {
    for (int pos = 0; pos < 4; ++pos) {
      int bits = 0;
      for (int m = 0; m < 4; ++m) bits |= (q[4 * (group + 16 * m) + pos] >> 4) << (2 * m);
      high[64 * group + 4 * j + pos] = static_cast<uint8_t>(bits);
    }
  }
}

void move_q6_k(BlockQ6_K& b, uint8_t* pb, int j, bool to_packed) {
  move_bytes(&b.d, pb + 2 * j, 2, to_packed);
  for (int k = 0; k < 16; ++k) move_bytes(&b.scales[k], pb + kK16Sc + kPackRows * k + j, 1, to_packed);
  uint8_t* low = pb + kQ6KLow;
  uint8_t* high = pb + kQ6KHigh;
  if (to_packed) return pack_q6_k_codes(b, low, high, j);
  // Unpacking (a row lookup): the stored block starts zeroed (unpack_row), so each field is or-ed in.
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int group = e / 4, pos = e % 4;
    const int pl = low[64 * (group % 32) + 4 * j + pos] >> (4 * (group / 32)) & 15;
    const int ph = high[64 * (group % 16) + 4 * j + pos] >> (2 * (group / 16)) & 3;
    uint8_t& ql = b.ql[64 * h + 32 * (s % 2) + l];
    uint8_t& qh = b.qh[32 * h + l];
    ql = static_cast<uint8_t>(ql | pl << (4 * (s / 2)));
    qh = static_cast<uint8_t>(qh | ph << (2 * s));
  }
}

// low[16][64] of Q3_K and Q2_K from a row's codes as bytes (their low 2 bits): bits 2m.. of
// byte 4j + pos of low[group] are element 4(group + 16m) + pos's.
void pack_2bit_low(const uint8_t* q, uint8_t* low, int j) {
  for (int group = 0; group < 16; ++group) {
    for (int pos = 0; pos < 4; ++pos) {
      int bits = 0;
      for (int m = 0; m < 4; ++m) bits |= (q[4 * (group + 16 * m) + pos] & 3) << (2 * m);
      low[64 * group + 4 * j + pos] = static_cast<uint8_t>(bits);
    }
  }
}

// Q3_K (layout in packed.h): d[16], sc[16][16], low[16][64], high[8][64]. Element e of the
// super-block is k-group G = e / 4, position b = e % 4: its low 2 bits are bits 2(G / 16).. of
// low[G % 16][4j + b], its hmask bit is bit G / 8 of high[G % 8][4j + b]. In the stored block
// (quant_blocks.h) e = 128h + 32s + l takes its low bits from bits 2s.. of qs[32h + l] and its
// hmask bit from bit 4h + s of hmask[l].
//
// Packing goes through the 3-bit codes as bytes, as pack_q6_k_codes.
void pack_q3_k_codes(const BlockQ3_K& b, uint8_t* low, uint8_t* high, int j) {
  uint8_t q[kQKK];  // low 2 bits, hmask bit as bit 2
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int lo = (b.qs[32 * h + l] >> (2 * s)) & 3;
        const int hi = (b.hmask[l] >> (4 * h + s)) & 1;
        q[128 * h + 32 * s + l] = static_cast<uint8_t>(lo | hi << 2);
      }
    }
  }
  pack_2bit_low(q, low, j);
  for (int group = 0; group < 8; ++group) {
    for (int pos = 0; pos < 4; ++pos) {
      int bits = 0;
      for (int m = 0; m < 8; ++m) bits |= (q[4 * (group + 8 * m) + pos] >> 2) << m;
      high[64 * group + 4 * j + pos] = static_cast<uint8_t>(bits);
    }
  }
}

void move_q3_k(BlockQ3_K& b, uint8_t* pb, int j, bool to_packed) {
  move_bytes(&b.d, pb + 2 * j, 2, to_packed);
  int8_t sc[16];
  if (to_packed) unpack_q3_k_scales(b.scales, sc);
  for (int k = 0; k < 16; ++k) move_bytes(&sc[k], pb + kK16Sc + kPackRows * k + j, 1, to_packed);
  if (!to_packed) pack_q3_k_scales(sc, b.scales);
  uint8_t* low = pb + kQ3KLow;
  uint8_t* high = pb + kQ3KHigh;
  if (to_packed) return pack_q3_k_codes(b, low, high, j);
  // Unpacking (a row lookup): the stored block starts zeroed (unpack_row), so each field is or-ed in.
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int group = e / 4, pos = e % 4;
    const int pl = low[64 * (group % 16) + 4 * j + pos] >> (2 * (group / 16)) & 3;
    const int ph = high[64 * (group % 8) + 4 * j + pos] >> (group / 8) & 1;
    b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | pl << (2 * s));
    b.hmask[l] = static_cast<uint8_t>(b.hmask[l] | ph << (4 * h + s));
  }
}

// Q2_K (layout in packed.h): d[16], dmin[16], scales[16][16], low[16][64]. Element e's code is
// bits 2(G / 16).. of low[G % 16][4j + b] (k-group G = e / 4, b = e % 4); in the stored block
// e = 128h + 32s + l takes it from bits 2s.. of qs[32h + l]. Scale bytes move as they are.
void move_q2_k(BlockQ2_K& b, uint8_t* pb, int j, bool to_packed) {
  move_bytes(&b.d, pb + 2 * j, 2, to_packed);
  move_bytes(&b.dmin, pb + kHalves + 2 * j, 2, to_packed);
  for (int k = 0; k < 16; ++k) move_bytes(&b.scales[k], pb + kQ2KSc + kPackRows * k + j, 1, to_packed);
  uint8_t* low = pb + kQ2KCodes;
  if (to_packed) {  // each packed byte written once, from the codes as bytes (as Q6_K's)
    uint8_t q[kQKK];
    for (int h = 0; h < 2; ++h) {
      for (int s = 0; s < 4; ++s) {
        for (int l = 0; l < 32; ++l) {
          q[128 * h + 32 * s + l] = static_cast<uint8_t>((b.qs[32 * h + l] >> (2 * s)) & 3);
        }
      }
    }
    return pack_2bit_low(q, low, j);
  }
  // Unpacking (a row lookup): the stored block starts zeroed (unpack_row), so each field is or-ed in.
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int group = e / 4, pos = e % 4;
    const int pl = low[64 * (group % 16) + 4 * j + pos] >> (2 * (group / 16)) & 3;
    b.qs[32 * h + l] = static_cast<uint8_t>(b.qs[32 * h + l] | pl << (2 * s));
  }
}

// Offsets inside a packed block (layout in packed.h).
constexpr size_t kMinOffset = kHalves;                      // Q4_1's m[16]

size_t codes_offset(DType type) {
  switch (type) {
    case DType::kQ4_0: return kQ4_0Codes;
    case DType::kQ4_1: return kQ4_1Codes;
    case DType::kQ5_0: return kQ5_0Codes;
    case DType::kQ5_1: return kQ5_1Codes;
    default: return kQ8_0Codes;
  }
}

// A 5-bit block's fifth bits (qh, element e at bit e) and the packed block's high[64] (packed.h):
// bit g of high[4j + k] is the fifth bit of the element that position k of k-group g holds,
// 4g + k (k-groups 0..3 hold elements 4g + k, 4..7 elements 16 + 4(g - 4) + k), so byte k
// gathers every fourth bit of qh from bit k (and scatters them back), three shift-or-mask steps
// each way. A loop over the 32 bits had been a quarter of `deepinfer run`'s time on Gemma 3,
// whose matrices are mostly Q5_0.
void move_high_bits(uint8_t* qh_bytes, uint8_t* high, int j, bool to_packed) {
  static_assert(kGroups8 == 8);
  uint32_t qh = 0;
  if (to_packed) std::memcpy(&qh, qh_bytes, 4);
  for (int k = 0; k < 4; ++k) {
    if (to_packed) {
      uint32_t x = (qh >> k) & 0x11111111u;  // bit 4g: element 4g + k
      x = (x | x >> 3) & 0x03030303u;
      x = (x | x >> 6) & 0x000F000Fu;
      x = (x | x >> 12) & 0xFFu;
      high[4 * j + k] = static_cast<uint8_t>(high[4 * j + k] | x);
    } else {
      uint32_t x = high[4 * j + k];
      x = (x | x << 12) & 0x000F000Fu;
      x = (x | x << 6) & 0x03030303u;
      x = (x | x << 3) & 0x11111111u;
      qh |= x << k;
    }
  }
  if (!to_packed) std::memcpy(qh_bytes, &qh, 4);
}

// A 4-bit block's nibbles (qs) of row j: 4 bytes into each of the 4 code vectors.
void move_nibbles(uint8_t* qs, uint8_t* codes, int j, bool to_packed) {
  for (int l = 0; l < kGroups4; ++l) move_bytes(qs + 4 * l, codes + 64 * l + 4 * j, 4, to_packed);
}

// Q4_0, Q4_1, Q5_0, Q5_1 (layouts in packed.h): d, Q4_1's and Q5_1's m, the 5-bit formats' high
// bits, the nibbles.
template <typename Block>
void move_4_or_5_bit(Block& b, uint8_t* pb, uint8_t* codes, int j, bool to_packed) {
  move_bytes(&b.d, pb + 2 * j, 2, to_packed);
  if constexpr (requires { b.m; }) move_bytes(&b.m, pb + kMinOffset + 2 * j, 2, to_packed);
  if constexpr (requires { b.qh; }) {
    move_high_bits(b.qh, pb + (requires { b.m; } ? 2 * kHalves : kHalves), j, to_packed);
  }
  move_nibbles(b.qs, codes, j, to_packed);
}

// Moves row j's block between `block` (stored format) and packed block pb.
void move_block(DType type, uint8_t* block, uint8_t* pb, int j, bool to_packed) {
  uint8_t* codes = pb + codes_offset(type);
  switch (type) {
    case DType::kQ2_K: return move_q2_k(*reinterpret_cast<BlockQ2_K*>(block), pb, j, to_packed);
    case DType::kQ3_K: return move_q3_k(*reinterpret_cast<BlockQ3_K*>(block), pb, j, to_packed);
    case DType::kQ4_K: return move_q4_k(*reinterpret_cast<BlockQ4_K*>(block), pb, j, to_packed);
    case DType::kQ5_K: return move_q5_k(*reinterpret_cast<BlockQ5_K*>(block), pb, j, to_packed);
    case DType::kQ6_K: return move_q6_k(*reinterpret_cast<BlockQ6_K*>(block), pb, j, to_packed);
    case DType::kQ4_0: return move_4_or_5_bit(*reinterpret_cast<BlockQ4_0*>(block), pb, codes, j, to_packed);
    case DType::kQ4_1: return move_4_or_5_bit(*reinterpret_cast<BlockQ4_1*>(block), pb, codes, j, to_packed);
    case DType::kQ5_0: return move_4_or_5_bit(*reinterpret_cast<BlockQ5_0*>(block), pb, codes, j, to_packed);
    case DType::kQ5_1: return move_4_or_5_bit(*reinterpret_cast<BlockQ5_1*>(block), pb, codes, j, to_packed);
    case DType::kQ8_0: {
      auto& b = *reinterpret_cast<BlockQ8_0*>(block);
      move_bytes(&b.d, pb + 2 * j, 2, to_packed);
      for (int g = 0; g < kGroups8; ++g) {
        for (int k = 0; k < 4; ++k) {
          uint8_t& p = codes[64 * g + 4 * j + k];
          if (to_packed) {
            p = static_cast<uint8_t>(static_cast<uint8_t>(b.qs[4 * g + k]) ^ 0x80);
          } else {
            b.qs[4 * g + k] = static_cast<int8_t>(p ^ 0x80);
          }
        }
      }
      return;
    }
    case DType::kMXFP4: {  // element k's code: nibble j % 2 of byte 8k + j / 2 of the codes
      auto& b = *reinterpret_cast<BlockMXFP4*>(block);
      move_bytes(&b.e, pb + j, 1, to_packed);
      uint8_t* mx = pb + kMxfp4Codes;
      const int shift = 4 * (j % 2);
      for (int k = 0; k < kQK; ++k) {
        uint8_t& p = mx[8 * k + j / 2];
        const int stored_shift = k < kQK / 2 ? 0 : 4;  // element k: nibble of qs[k % 16]
        uint8_t& q = b.qs[k % (kQK / 2)];
        if (to_packed) {
          p = static_cast<uint8_t>(p | ((q >> stored_shift) & 15) << shift);
        } else {
          q = static_cast<uint8_t>(q | ((p >> shift) & 15) << stored_shift);
        }
      }
      return;
    }
    default: DI_ICHECK(false && "no packed layout for this type");
  }
}

}  // namespace

namespace {

// The packed products of the tier of quant.h's table (DEEPINFER_ISA caps it), so packed and
// unpacked products are never mixed tiers within a process; both null below AVX2.
struct PackedTier {
  PackedGemmFn (*gemm)(DType) = nullptr;
  PackedActInfoFn (*info)(DType) = nullptr;
};

const PackedTier& packed_tier() {
  static const PackedTier tier = [] {
    const std::string_view isa = kernel_isa();
    if (isa == "avx512") return PackedTier{avx512::packed_gemm_fn, avx512::packed_act_info_fn};
    if (isa == "avx2") return PackedTier{avx2::packed_gemm_fn, avx2::packed_act_info_fn};
    return PackedTier{};
  }();
  return tier;
}

}  // namespace

PackedGemmFn packed_gemm_fn(DType weight_type) {
  const PackedTier& tier = packed_tier();
  return tier.gemm != nullptr ? tier.gemm(weight_type) : nullptr;
}

PackedActInfoFn packed_act_info_fn(DType weight_type) {
  const PackedTier& tier = packed_tier();
  return packed_gemm_fn(weight_type) != nullptr ? tier.info(weight_type) : nullptr;
}

bool weight_prefetch() {
  static const bool on = [] {
    if (const char* set = std::getenv("DEEPINFER_WEIGHT_PREFETCH")) return std::string_view(set) != "0";
#if defined(__x86_64__) || defined(__i386__)
    unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx) == 0) return false;
    char vendor[13] = {};
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    // And every CPU on the AVX2 tier (AMD Zen 3 measured: packed.h).
    return std::string_view(vendor) == "GenuineIntel" || std::string_view(kernel_isa()) == "avx2";
#else
    return false;
#endif
  }();
  return on;
}

bool has_packed_layout(DType type) { return packed_block_bytes(type) != 0; }

bool packable(DType type, int64_t n_out, int64_t n_in) {
  return packed_gemm_fn(type) != nullptr && n_out > 0 && n_out % kPackRows == 0 && n_in % block_elements(type) == 0;
}

size_t packed_group_bytes(DType type, int64_t n_in) {
  return packed_block_bytes(type) * static_cast<size_t>(n_in / block_elements(type));
}

namespace {

// pack_matrix for stored blocks of kBlockBytes: each row's block is copied out with a copy of
// that fixed size (a few vector moves; the variable-size copy was a `rep movsq` that took half
// the time of packing Gemma 3's matrices).
template <size_t kBlockBytes>
void pack_groups(DType type, const uint8_t* src, int64_t n_out, int64_t n_in, uint8_t* dst) {
  const size_t pbytes = packed_block_bytes(type);
  const size_t row_bytes = dtype_row_bytes(type, n_in);
  const int64_t nb = n_in / block_elements(type);
  alignas(8) uint8_t block[kBlockBytes];
  for (int64_t g = 0; g < n_out / kPackRows; ++g) {
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* pb = dst + (g * nb + i) * pbytes;
      for (int j = 0; j < kPackRows; ++j) {
        std::memcpy(block, src + (g * kPackRows + j) * row_bytes + i * kBlockBytes, kBlockBytes);
        move_block(type, block, pb, j, true);
      }
    }
  }
}

// pack_matrix for the float formats: element k of a group's 16 rows side by side. A tile of
// kRun elements of the 16 rows is read into a buffer first (16 sequential reads), then written
// out element by element (one sequential write): strided either way, the reads or the writes
// went at a fraction of the memory's speed.
template <class T>
void pack_float_groups(const uint8_t* src, int64_t n_out, int64_t n_in, uint8_t* dst) {
  constexpr int64_t kRun = 256;
  T tile[kPackRows][kRun];
  for (int64_t g = 0; g < n_out / kPackRows; ++g) {
    const T* rows = reinterpret_cast<const T*>(src) + g * kPackRows * n_in;
    T* group = reinterpret_cast<T*>(dst) + g * kPackRows * n_in;
    for (int64_t k0 = 0; k0 < n_in; k0 += kRun) {
      const int64_t count = std::min(n_in - k0, kRun);
      for (int64_t j = 0; j < kPackRows; ++j) std::memcpy(tile[j], rows + j * n_in + k0, count * sizeof(T));
      T* out = group + k0 * kPackRows;
      for (int64_t k = 0; k < count; ++k) {
        for (int64_t j = 0; j < kPackRows; ++j) out[k * kPackRows + j] = tile[j][k];
      }
    }
  }
}

}  // namespace

void pack_matrix(DType type, const uint8_t* src, int64_t n_out, int64_t n_in, uint8_t* dst) {
  DI_ICHECK(has_packed_layout(type) && n_out % kPackRows == 0 && n_in % block_elements(type) == 0);
  if (type == DType::kF32) return pack_float_groups<uint32_t>(src, n_out, n_in, dst);
  if (is_float(type)) return pack_float_groups<uint16_t>(src, n_out, n_in, dst);
  // Q5_0 and Q2_K, Q3_K, Q6_K or their bits in.
  std::memset(dst, 0, packed_group_bytes(type, n_in) * static_cast<size_t>(n_out / kPackRows));
  switch (type) {
    case DType::kQ4_0: return pack_groups<sizeof(BlockQ4_0)>(type, src, n_out, n_in, dst);
    case DType::kQ4_1: return pack_groups<sizeof(BlockQ4_1)>(type, src, n_out, n_in, dst);
    case DType::kQ5_0: return pack_groups<sizeof(BlockQ5_0)>(type, src, n_out, n_in, dst);
    case DType::kQ5_1: return pack_groups<sizeof(BlockQ5_1)>(type, src, n_out, n_in, dst);
    case DType::kQ8_0: return pack_groups<sizeof(BlockQ8_0)>(type, src, n_out, n_in, dst);
    case DType::kQ2_K: return pack_groups<sizeof(BlockQ2_K)>(type, src, n_out, n_in, dst);
    case DType::kQ3_K: return pack_groups<sizeof(BlockQ3_K)>(type, src, n_out, n_in, dst);
    case DType::kQ4_K: return pack_groups<sizeof(BlockQ4_K)>(type, src, n_out, n_in, dst);
    case DType::kQ5_K: return pack_groups<sizeof(BlockQ5_K)>(type, src, n_out, n_in, dst);
    case DType::kQ6_K: return pack_groups<sizeof(BlockQ6_K)>(type, src, n_out, n_in, dst);
    case DType::kMXFP4: return pack_groups<sizeof(BlockMXFP4)>(type, src, n_out, n_in, dst);
    default: DI_ICHECK(false && "no packed layout for this type");
  }
}

void unpack_row(DType type, const uint8_t* packed, int64_t n_in, int64_t row, uint8_t* dst) {
  const size_t pbytes = packed_block_bytes(type);
  const size_t bbytes = stored_block_bytes(type);
  const int64_t nb = n_in / block_elements(type);
  const int64_t g = row / kPackRows;
  const int j = static_cast<int>(row % kPackRows);
  if (is_float(type)) {  // element i of row j: bbytes bytes at j in packed block i
    const uint8_t* group = packed + g * nb * pbytes + j * bbytes;
    for (int64_t i = 0; i < nb; ++i) std::memcpy(dst + i * bbytes, group + i * pbytes, bbytes);
    return;
  }
  for (int64_t i = 0; i < nb; ++i) {
    // move_block only reads the packed block when unpacking.
    auto* pb = const_cast<uint8_t*>(packed + (g * nb + i) * pbytes);
    alignas(8) uint8_t block[kMaxStoredBlock];
    std::memset(block, 0, bbytes);
    move_block(type, block, pb, j, false);
    std::memcpy(dst + i * bbytes, block, bbytes);
  }
}

void dequantize_packed_row(DType type, const uint8_t* packed, int64_t n_in, int64_t row, float* dst) {
  const size_t pbytes = packed_block_bytes(type);
  const size_t bbytes = stored_block_bytes(type);
  const int64_t elems = block_elements(type);
  const int64_t nb = n_in / elems;
  const int64_t g = row / kPackRows;
  const int j = static_cast<int>(row % kPackRows);
  if (is_float(type)) {  // a run of elements unpacked, then converted
    constexpr int64_t kRun = 256;
    alignas(8) uint8_t run[kRun * sizeof(float)];
    for (int64_t i0 = 0; i0 < nb; i0 += kRun) {
      const int64_t count = std::min(kRun, nb - i0);
      const uint8_t* group = packed + (g * nb + i0) * pbytes + j * bbytes;
      for (int64_t i = 0; i < count; ++i) std::memcpy(run + i * bbytes, group + i * pbytes, bbytes);
      dequantize_row(type, run, dst + i0, count);
    }
    return;
  }
  alignas(8) uint8_t block[kMaxStoredBlock];
  for (int64_t i = 0; i < nb; ++i) {
    auto* pb = const_cast<uint8_t*>(packed + (g * nb + i) * pbytes);
    std::memset(block, 0, bbytes);
    move_block(type, block, pb, j, false);
    dequantize_row(type, block, dst + i * elems, elems);
  }
}

void PackedWeights::pack(WeightMatrix& m) {
  if (m.packed != nullptr || !packable(m.dtype, m.n_out, m.n_in)) return;
  const size_t bytes = packed_group_bytes(m.dtype, m.n_in) * static_cast<size_t>(m.n_out / kPackRows);
  uint8_t* dst = allocate(bytes);
  pack_matrix(m.dtype, m.data, m.n_out, m.n_in, dst);
  bytes_ += bytes;
  m.packed = dst;
}

uint8_t* PackedWeights::allocate(size_t bytes) {
  // Matrices share chunks: a model's hundreds of small matrices each in its own map would be
  // too small for a huge page. Unused tails of chunks are never touched, so never resident.
  constexpr size_t kChunk = size_t{64} << 20, kAlign = 64;
  const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
  if (buffers_.empty() || chunk_used_ + need > buffers_.back().size()) {
    buffers_.emplace_back(std::max(kChunk, need));
    chunk_used_ = 0;
  }
  uint8_t* p = buffers_.back().data() + chunk_used_;
  chunk_used_ += need;
  return p;
}

}  // namespace deepinfer::cpu
