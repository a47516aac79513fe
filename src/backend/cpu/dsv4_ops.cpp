#include "backend/cpu/dsv4_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "core/check.h"

namespace deepinfer::cpu {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void hyper_pre_row(const backend::HyperParams& p, int64_t d, const float* streams, const float* mixes,
                   const float* base, const float* scale, float* collapsed, float* post, float* comb,
                   float* pre_out) {
  const int64_t s = p.n_streams;
  float pre[64];
  DI_ICHECK(s <= 64);
  for (int64_t i = 0; i < s; ++i) pre[i] = sigmoid(mixes[i] * scale[0] + base[i]) + p.eps;
  if (pre_out != nullptr) std::copy_n(pre, s, pre_out);
  if (post != nullptr) {
    for (int64_t i = 0; i < s; ++i) post[i] = 2.0f * sigmoid(mixes[s + i] * scale[1] + base[s + i]);
    // comb[j * s + k]: row j is the input stream, k the output stream.
    for (int64_t j = 0; j < s; ++j) {
      float* row = comb + j * s;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < s; ++k) {
        row[k] = mixes[2 * s + j * s + k] * scale[2] + base[2 * s + j * s + k];
        mx = std::max(mx, row[k]);
      }
      float sum = 0;
      for (int64_t k = 0; k < s; ++k) sum += row[k] = std::exp(row[k] - mx);
      for (int64_t k = 0; k < s; ++k) row[k] = row[k] / sum + p.eps;
    }
    const auto normalise_columns = [&] {
      for (int64_t k = 0; k < s; ++k) {
        float sum = 0;
        for (int64_t j = 0; j < s; ++j) sum += comb[j * s + k];
        for (int64_t j = 0; j < s; ++j) comb[j * s + k] /= sum + p.eps;
      }
    };
    normalise_columns();
    for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
      for (int64_t j = 0; j < s; ++j) {
        float sum = 0;
        for (int64_t k = 0; k < s; ++k) sum += comb[j * s + k];
        for (int64_t k = 0; k < s; ++k) comb[j * s + k] /= sum + p.eps;
      }
      normalise_columns();
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    float acc = 0;
    for (int64_t i = 0; i < s; ++i) acc += pre[i] * streams[i * d + c];
    collapsed[c] = acc;
  }
}

void hyper_post_row(const backend::HyperParams& p, int64_t d, const float* streams, const float* x, const float* post,
                    const float* comb, float* out_streams) {
  const int64_t s = p.n_streams;
  for (int64_t k = 0; k < s; ++k) {
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0;
      for (int64_t j = 0; j < s; ++j) acc += comb[j * s + k] * streams[j * d + c];
      out_streams[k * d + c] = post[k] * x[c] + acc;
    }
  }
}

void route_sqrt_softplus_row(const float* logits, int64_t n_expert, const float* bias, const int32_t* fixed_ids,
                             int64_t k, float scale, int32_t* ids, float* weights) {
  std::vector<float> scores(static_cast<size_t>(n_expert));
  for (int64_t e = 0; e < n_expert; ++e) {
    const float l = logits[e];
    // softplus as PyTorch computes it (threshold 20: linear above), then the square root.
    const float sp = l > 20.0f ? l : std::log1p(std::exp(l));
    scores[static_cast<size_t>(e)] = std::sqrt(sp);
  }
  if (fixed_ids != nullptr) {
    for (int64_t i = 0; i < k; ++i) {
      DI_ICHECK(fixed_ids[i] >= 0 && fixed_ids[i] < n_expert);
      ids[i] = fixed_ids[i];
    }
  } else {
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    std::iota(order.begin(), order.end(), 0);
    const auto key = [&](int32_t e) { return scores[static_cast<size_t>(e)] + (bias ? bias[e] : 0.0f); };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float ka = key(a), kb = key(b);
      return ka > kb || (ka == kb && a < b);
    });
    for (int64_t i = 0; i < k; ++i) ids[i] = order[static_cast<size_t>(i)];
  }
  float sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += weights[i] = scores[static_cast<size_t>(ids[i])];
  for (int64_t i = 0; i < k; ++i) weights[i] = weights[i] / (sum + 1e-20f) * scale;
}

void compress_entry(int64_t head_dim, int64_t n_slots, const float* const* kv, const float* const* gate,
                    const bool* valid, const float* norm, float eps, float* out) {
  double ss = 0;
  for (int64_t c = 0; c < head_dim; ++c) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < n_slots; ++s) {
      if (valid[s]) mx = std::max(mx, gate[s][c]);
    }
    float sum = 0;
    for (int64_t s = 0; s < n_slots; ++s) {
      if (valid[s]) sum += std::exp(gate[s][c] - mx);
    }
    float acc = 0;
    for (int64_t s = 0; s < n_slots; ++s) {
      if (valid[s]) acc += kv[s][c] * (std::exp(gate[s][c] - mx) / sum);
    }
    out[c] = acc;
    ss += static_cast<double>(acc) * acc;
  }
  const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(head_dim)) + eps);
  for (int64_t c = 0; c < head_dim; ++c) out[c] = norm[c] * (out[c] * inv);
}

void rope_trailing(float* x, int64_t head_dim, int64_t n_rot, float position, const float* inv_freq, float sign) {
  float* r = x + head_dim - n_rot;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const float theta = position * inv_freq[i];
    const float c = std::cos(theta), s = sign * std::sin(theta);
    const float x0 = r[2 * i], x1 = r[2 * i + 1];
    r[2 * i] = x0 * c - x1 * s;
    r[2 * i + 1] = x1 * c + x0 * s;
  }
}

namespace {

// 2^ceil(log2(v)) for a positive normal float, from its bits (as the release computes it).
float pow2_ceil(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, 4);
  const uint32_t exponent = (bits >> 23) & 0xff;
  const uint32_t up = (bits & 0x7fffff) != 0 ? 1 : 0;
  const uint32_t out_bits = (exponent + up) << 23;
  float out = 0;
  std::memcpy(&out, &out_bits, 4);
  return out;
}

// Nearest value of a float format with `mantissa` bits and smallest normal exponent min_exp
// (its subnormals below), ties to even; |v| within the format's range.
float round_to_format(float v, int mantissa, int min_exp) {
  const float a = std::fabs(v);
  if (a == 0.0f) return v;
  const int e = std::max(std::ilogb(a), min_exp);
  const float quantum = std::ldexp(1.0f, e - mantissa);
  return std::copysign(std::nearbyint(a / quantum) * quantum, v);
}

float to_e4m3(float v) { return round_to_format(std::clamp(v, -448.0f, 448.0f), 3, -6); }
float to_e2m1(float v) { return round_to_format(std::clamp(v, -6.0f, 6.0f), 1, 0); }

}  // namespace

void engram_mix_row(int64_t s, int64_t d, float* streams, const float* kv, const float* weight, float eps) {
  const float* value = kv + s * d;
  for (int64_t i = 0; i < s; ++i) {
    float* x = streams + i * d;
    const float* k = kv + i * d;
    const float* w = weight + i * d;
    float xx = 0, kk = 0, dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      xx += x[c] * x[c];
      kk += k[c] * k[c];
      dot += x[c] * w[c] * k[c];
    }
    const float n = static_cast<float>(d);
    const float rstd = (1.0f / std::sqrt(xx / n + eps)) * (1.0f / std::sqrt(kk / n + eps));
    const float score = dot * rstd / std::sqrt(n);
    const float gate = sigmoid(std::copysign(std::sqrt(std::max(std::fabs(score), 1e-6f)), score));
    for (int64_t c = 0; c < d; ++c) x[c] += gate * value[c];
  }
}

void cache_round_trip_row(float* x, int64_t n, backend::CacheFormat format, int64_t block) {
  DI_ICHECK(block > 0 && n % block == 0);
  for (int64_t b = 0; b < n; b += block) {
    float* v = x + b;
    float amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(v[i]));
    switch (format) {
      case backend::CacheFormat::kFp8E4M3: {
        const float scale = pow2_ceil(std::max(amax, 1e-4f) * static_cast<float>(1.0 / 448));
        for (int64_t i = 0; i < block; ++i) v[i] = to_e4m3(v[i] / scale) * scale;
        break;
      }
      case backend::CacheFormat::kMxfp4: {
        const float scale = pow2_ceil(std::max(amax, 6.0f * 0x1p-126f) * static_cast<float>(1.0 / 6));
        for (int64_t i = 0; i < block; ++i) v[i] = to_e2m1(v[i] / scale) * scale;
        break;
      }
      case backend::CacheFormat::kNvfp4: {
        const float scale = to_e4m3(std::max(amax, 6.0f * 0x1p-9f) / 6.0f);
        for (int64_t i = 0; i < block; ++i) v[i] = to_e2m1(v[i] / scale) * scale;
        break;
      }
    }
  }
}

}  // namespace deepinfer::cpu
