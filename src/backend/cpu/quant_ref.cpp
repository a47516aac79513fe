// Scalar reference of the block formats. Each weight format is decoded into plain integers
// (codes with their offsets applied, per-sub-block scales and mins) by one function, and both
// dequantization and the dot product are written on top of that decoding, so the two cannot
// disagree about the bit layout. Float operations are ordered as in gguf-py's numpy
// dequantizers (scale * sub-scale first, then * code, then - min), which the golden vectors
// come from.
#include <cmath>
#include <cstring>

#include "backend/cpu/quant_kernels.h"
#include "core/check.h"
#include "core/half.h"

namespace deepinfer::cpu::ref {

namespace {

// ---- 32-element formats ------------------------------------------------------------------

// One block as codes q (offset already subtracted for Q4_0/Q5_0): x = d * q + m.
struct Decoded32 {
  float d = 0.0f;
  float m = 0.0f;
  bool has_min = false;
  int8_t q[kQK];
};

void split_nibbles(const uint8_t* qs, int8_t* q) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = static_cast<int8_t>(qs[j] & 15);
    q[j + kQK / 2] = static_cast<int8_t>(qs[j] >> 4);
  }
}

void add_fifth_bit(const uint8_t* qh_bytes, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < kQK; ++j) q[j] = static_cast<int8_t>(q[j] | (((qh >> j) & 1) << 4));
}

void decode(const BlockQ4_0& b, Decoded32& out) {
  out.d = fp16_to_fp32(b.d);
  split_nibbles(b.qs, out.q);
  for (int8_t& v : out.q) v = static_cast<int8_t>(v - 8);
}

void decode(const BlockQ4_1& b, Decoded32& out) {
  out.d = fp16_to_fp32(b.d);
  out.m = fp16_to_fp32(b.m);
  out.has_min = true;
  split_nibbles(b.qs, out.q);
}

void decode(const BlockQ5_0& b, Decoded32& out) {
  out.d = fp16_to_fp32(b.d);
  split_nibbles(b.qs, out.q);
  add_fifth_bit(b.qh, out.q);
  for (int8_t& v : out.q) v = static_cast<int8_t>(v - 16);
}

void decode(const BlockQ5_1& b, Decoded32& out) {
  out.d = fp16_to_fp32(b.d);
  out.m = fp16_to_fp32(b.m);
  out.has_min = true;
  split_nibbles(b.qs, out.q);
  add_fifth_bit(b.qh, out.q);
}

void decode(const BlockMXFP4& b, Decoded32& out) {
  out.d = mxfp4_scale(b.e);
  split_nibbles(b.qs, out.q);
  for (int8_t& v : out.q) v = kMxfp4Doubled[v];
}

void decode(const BlockQ8_0& b, Decoded32& out) {
  out.d = fp16_to_fp32(b.d);
  std::memcpy(out.q, b.qs, kQK);
}

void decode(const BlockQ8_1& b, Decoded32& out) {
  out.d = fp16_to_fp32(b.d);
  std::memcpy(out.q, b.qs, kQK);
}

template <typename Block>
void dequantize_32(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const Block*>(src);
  Decoded32 dec;
  for (int64_t i = 0; i < n / kQK; ++i) {
    decode(blocks[i], dec);
    for (int j = 0; j < kQK; ++j) {
      dst[i * kQK + j] = dec.has_min ? dec.d * dec.q[j] + dec.m : dec.d * dec.q[j];
    }
  }
}

int block_dot(const int8_t* a, const int8_t* b, int n) {
  int sum = 0;
  for (int j = 0; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

// Q4_0, Q5_0, Q8_0 with Q8_0 activations: sum over blocks of dx * dy * sum(qx * qy).
template <typename Block>
float vec_dot_32_q8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  Decoded32 dec;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    decode(x[i], dec);
    sum += static_cast<float>(block_dot(dec.q, y[i].qs, kQK)) * (dec.d * fp16_to_fp32(y[i].d));
  }
  return sum;
}

// Q4_1, Q5_1 with Q8_1 activations: x = dx * qx + m, so
// sum(x * y) = dx * dy * sum(qx * qy) + m * (dy * sum(qy)) and the last factor is Q8_1's s.
template <typename Block>
float vec_dot_32_q8_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  Decoded32 dec;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    decode(x[i], dec);
    const int sumi = block_dot(dec.q, y[i].qs, kQK);
    sum += (dec.d * fp16_to_fp32(y[i].d)) * static_cast<float>(sumi) + dec.m * fp16_to_fp32(y[i].s);
  }
  return sum;
}

// ---- k-quants (256-element super-blocks) -------------------------------------------------

// One super-block: x = d * sc[k] * q - dmin * mn[k] for element e of sub-block k = e / sub.
struct DecodedK {
  float d = 0.0f;
  float dmin = 0.0f;
  bool has_min = false;
  int sub = 16;  // elements per sub-block
  int8_t q[kQKK];
  int sc[16];
  int mn[16];
};

void decode(const BlockQ2_K& b, DecodedK& out) {
  out.d = fp16_to_fp32(b.d);
  out.dmin = fp16_to_fp32(b.dmin);
  out.has_min = true;
  out.sub = 16;
  for (int k = 0; k < 16; ++k) {
    out.sc[k] = b.scales[k] & 15;
    out.mn[k] = b.scales[k] >> 4;
  }
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        out.q[128 * h + 32 * s + l] = static_cast<int8_t>((b.qs[32 * h + l] >> (2 * s)) & 3);
      }
    }
  }
}

void decode(const BlockQ3_K& b, DecodedK& out) {
  out.d = fp16_to_fp32(b.d);
  out.sub = 16;
  int8_t sc[16];
  unpack_q3_k_scales(b.scales, sc);
  for (int k = 0; k < 16; ++k) {
    out.sc[k] = sc[k];
    out.mn[k] = 0;
  }
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * s)) & 3;
        const bool high = (b.hmask[l] >> (4 * h + s)) & 1;
        out.q[128 * h + 32 * s + l] = static_cast<int8_t>(low - (high ? 0 : 4));
      }
    }
  }
}

void decode(const BlockQ4_K& b, DecodedK& out) {
  out.d = fp16_to_fp32(b.d);
  out.dmin = fp16_to_fp32(b.dmin);
  out.has_min = true;
  out.sub = 32;
  uint8_t sc[8], mn[8];
  unpack_q4_k_scales(b.scales, sc, mn);
  for (int k = 0; k < 8; ++k) {
    out.sc[k] = sc[k];
    out.mn[k] = mn[k];
  }
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      out.q[64 * p + l] = static_cast<int8_t>(b.qs[32 * p + l] & 15);
      out.q[64 * p + 32 + l] = static_cast<int8_t>(b.qs[32 * p + l] >> 4);
    }
  }
}

void decode(const BlockQ5_K& b, DecodedK& out) {
  out.d = fp16_to_fp32(b.d);
  out.dmin = fp16_to_fp32(b.dmin);
  out.has_min = true;
  out.sub = 32;
  uint8_t sc[8], mn[8];
  unpack_q4_k_scales(b.scales, sc, mn);
  for (int k = 0; k < 8; ++k) {
    out.sc[k] = sc[k];
    out.mn[k] = mn[k];
  }
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const int lo = 64 * p + l, hi = 64 * p + 32 + l;
      out.q[lo] = static_cast<int8_t>((b.qs[32 * p + l] & 15) | (((b.qh[l] >> (lo / 32)) & 1) << 4));
      out.q[hi] = static_cast<int8_t>((b.qs[32 * p + l] >> 4) | (((b.qh[l] >> (hi / 32)) & 1) << 4));
    }
  }
}

void decode(const BlockQ6_K& b, DecodedK& out) {
  out.d = fp16_to_fp32(b.d);
  out.sub = 16;
  for (int k = 0; k < 16; ++k) {
    out.sc[k] = b.scales[k];
    out.mn[k] = 0;
  }
  for (int h = 0; h < 2; ++h) {
    for (int s = 0; s < 4; ++s) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t ql = b.ql[64 * h + 32 * (s % 2) + l];
        const int low = s < 2 ? ql & 15 : ql >> 4;
        const int high = (b.qh[32 * h + l] >> (2 * s)) & 3;
        out.q[128 * h + 32 * s + l] = static_cast<int8_t>((low | (high << 4)) - 32);
      }
    }
  }
}

template <typename Block>
void dequantize_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const Block*>(src);
  DecodedK dec;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    decode(blocks[i], dec);
    float* y = dst + i * kQKK;
    for (int k = 0; k < kQKK / dec.sub; ++k) {
      const float dl = dec.d * static_cast<float>(dec.sc[k]);
      const float ml = dec.dmin * static_cast<float>(dec.mn[k]);
      for (int l = 0; l < dec.sub; ++l) {
        const int e = k * dec.sub + l;
        y[e] = dec.has_min ? dl * dec.q[e] - ml : dl * dec.q[e];
      }
    }
  }
}

// k-quants with Q8_K activations: per super-block
//   sum(x * y) = dx * dy * sum_k sc[k] * sum_{e in k}(qx * qy) - dmin * dy * sum_k mn[k] * sum_{e in k}(qy)
// where the last inner sum comes from Q8_K's bsums (per 16 elements).
template <typename Block>
float vec_dot_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  DecodedK dec;
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    decode(x[i], dec);
    int sumi = 0, summ = 0;
    for (int k = 0; k < kQKK / dec.sub; ++k) {
      sumi += dec.sc[k] * block_dot(dec.q + k * dec.sub, y[i].qs + k * dec.sub, dec.sub);
      int bsum = 0;
      for (int g = k * dec.sub / 16; g < (k + 1) * dec.sub / 16; ++g) bsum += y[i].bsums[g];
      summ += dec.mn[k] * bsum;
    }
    // Explicit fmas: the SIMD paths use the same two, so they agree bit for bit whatever
    // contraction the compiler would otherwise choose.
    sum = std::fma(y[i].d * dec.d, static_cast<float>(sumi), sum);
    if (dec.has_min) sum = std::fma(-(y[i].d * dec.dmin), static_cast<float>(summ), sum);
  }
  return sum;
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int j = 0; j < kQKK; ++j) dst[i * kQKK + j] = blocks[i].d * blocks[i].qs[j];
  }
}

// ---- plain types ---------------------------------------------------------------------------

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}
void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

// Weight rows of plain types against float activations.
float vec_dot_f32(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}
float vec_dot_f16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const float*>(a);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(x[i]) * y[i];
  return sum;
}
float vec_dot_bf16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const float*>(a);
  float sum = 0.0f;
  // Explicit fma: left to contraction, the compiler may vectorise the products and add them
  // apart in one of the two twins (GCC 12 did for MXFP4 with -march=sapphirerapids).
  for (int64_t i = 0; i < n; ++i) sum = std::fma(bf16_to_fp32(x[i]), y[i], sum);
  return sum;
}
// MXFP4 against float activations (vec_dot_type: F32), as the plain types: each weight exact.
float vec_dot_mxfp4(const void* w, const void* a, int64_t n) {
  const auto* y = static_cast<const float*>(a);
  float values[kQK];
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i += kQK) {
    dequantize_32<BlockMXFP4>(static_cast<const BlockMXFP4*>(w) + i / kQK, values, kQK);
    for (int j = 0; j < kQK; ++j) sum = std::fma(values[j], y[i + j], sum);
  }
  return sum;
}

// ---- activation quantizers -----------------------------------------------------------------

// Q8_0 and Q8_1: d = amax / 127, q = x / d rounded half away from zero (roundf); d is stored
// as a half but the codes use the unrounded d.
struct Block8Stats {
  float d;
  int sum;  // sum of the codes
};

Block8Stats quantize_block_8(const float* x, uint16_t* d_out, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
    sum += q[j];
  }
  *d_out = fp32_to_fp16(d);
  return {d, sum};
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) quantize_block_8(src + i * kQK, &y[i].d, y[i].qs);
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const Block8Stats st = quantize_block_8(src + i * kQK, &y[i].d, y[i].qs);
    y[i].s = fp32_to_fp16(st.d * static_cast<float>(st.sum));
  }
}

// Q8_K: the element of largest magnitude, with its sign, maps to -127 (d = max / -127); codes
// round half to even, as llama.cpp's nearest_int does. bsums are the sums per 16 codes.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) {
      const long v = std::lrintf(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v > 127 ? 127 : v);
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace

DequantizeRowFn dequantize_row_fn(DType type) {
  switch (type) {
    case DType::kF32: return dequantize_f32;
    case DType::kF16: return dequantize_f16;
    case DType::kBF16: return dequantize_bf16;
    case DType::kQ4_0: return dequantize_32<BlockQ4_0>;
    case DType::kQ4_1: return dequantize_32<BlockQ4_1>;
    case DType::kQ5_0: return dequantize_32<BlockQ5_0>;
    case DType::kQ5_1: return dequantize_32<BlockQ5_1>;
    case DType::kQ8_0: return dequantize_32<BlockQ8_0>;
    case DType::kQ8_1: return dequantize_32<BlockQ8_1>;
    case DType::kMXFP4: return dequantize_32<BlockMXFP4>;
    case DType::kQ2_K: return dequantize_k<BlockQ2_K>;
    case DType::kQ3_K: return dequantize_k<BlockQ3_K>;
    case DType::kQ4_K: return dequantize_k<BlockQ4_K>;
    case DType::kQ5_K: return dequantize_k<BlockQ5_K>;
    case DType::kQ6_K: return dequantize_k<BlockQ6_K>;
    case DType::kQ8_K: return dequantize_q8_k;
    default: return nullptr;
  }
}

QuantizeRowFn quantize_row_fn(DType type) {
  switch (type) {
    case DType::kF32: return quantize_f32;
    case DType::kF16: return quantize_f16;
    case DType::kBF16: return quantize_bf16;
    case DType::kQ8_0: return quantize_q8_0;
    case DType::kQ8_1: return quantize_q8_1;
    case DType::kQ8_K: return quantize_q8_k;
    default: return nullptr;
  }
}

VecDotFn vec_dot_fn(DType weight_type) {
  switch (weight_type) {
    case DType::kF32: return vec_dot_f32;
    case DType::kF16: return vec_dot_f16;
    case DType::kBF16: return vec_dot_bf16;
    case DType::kQ4_0: return vec_dot_32_q8_0<BlockQ4_0>;
    case DType::kQ5_0: return vec_dot_32_q8_0<BlockQ5_0>;
    case DType::kQ8_0: return vec_dot_32_q8_0<BlockQ8_0>;
    case DType::kMXFP4: return vec_dot_mxfp4;
    case DType::kQ4_1: return vec_dot_32_q8_1<BlockQ4_1>;
    case DType::kQ5_1: return vec_dot_32_q8_1<BlockQ5_1>;
    case DType::kQ2_K: return vec_dot_k<BlockQ2_K>;
    case DType::kQ3_K: return vec_dot_k<BlockQ3_K>;
    case DType::kQ4_K: return vec_dot_k<BlockQ4_K>;
    case DType::kQ5_K: return vec_dot_k<BlockQ5_K>;
    case DType::kQ6_K: return vec_dot_k<BlockQ6_K>;
    default: return nullptr;
  }
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const DequantizeRowFn fn = dequantize_row_fn(type);
  DI_ICHECK(fn != nullptr);
  fn(src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const QuantizeRowFn fn = quantize_row_fn(type);
  DI_ICHECK(fn != nullptr);
  fn(src, dst, n);
}

float vec_dot(DType weight_type, const void* weight_row, const void* activation_row, int64_t n) {
  const VecDotFn fn = vec_dot_fn(weight_type);
  DI_ICHECK(fn != nullptr);
  return fn(weight_row, activation_row, n);
}

}  // namespace deepinfer::cpu::ref
