#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/check.h"

namespace deepinfer::cpu {

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool) {
  const int64_t d = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t kv_stride = shape.n_head_kv * d;
  DI_ICHECK(d <= 1024 && shape.n_head % shape.n_head_kv == 0);
  pool.parallel_for(n_tokens * shape.n_head, [&](int, int64_t begin, int64_t end) {
    float acc[1024];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / shape.n_head;
      const int64_t h = item % shape.n_head;
      const int64_t kv_h = h / group;
      const SequenceKv& seq = sequences[static_cast<size_t>(token_seq[t])];
      const float* qh = q + (t * shape.n_head + h) * d;
      // Online softmax (one pass, running max): no score buffer, exact up to rounding.
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      std::fill(acc, acc + d, 0.0f);
      const int64_t window_first = shape.sliding_window > 0 ? positions[t] - shape.sliding_window + 1 : 0;
      const int64_t first = std::max<int64_t>({0, window_first, seq.min_position});
      for (int64_t j = first; j <= positions[t]; ++j) {
        const int64_t row = seq.row(j) * kv_stride + kv_h * d;
        const float s = dot_f32(qh, seq.k + row, d) * shape.scale;
        float rescale = 1.0f;
        if (s > m) {
          rescale = std::exp(m - s);
          l *= rescale;
          m = s;
        }
        const float p = std::exp(s - m);
        l += p;
        scale_add_f32(acc, rescale, p, seq.v + row, d);
      }
      float* oh = out + (t * shape.n_head + h) * d;
      const float inv = 1.0f / l;
      for (int64_t i = 0; i < d; ++i) oh[i] = acc[i] * inv;
    }
  });
}

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               const float* k, const float* v, float* out, ThreadPool& pool) {
  const SequenceKv seq{k, v, nullptr, 1};
  // Every token is in sequence 0.
  thread_local std::vector<int32_t> zeros;
  if (static_cast<int64_t>(zeros.size()) < n_tokens) zeros.assign(static_cast<size_t>(n_tokens), 0);
  attention(shape, q, n_tokens, positions, std::span<const SequenceKv>(&seq, 1),
            std::span<const int32_t>(zeros.data(), static_cast<size_t>(n_tokens)), out, pool);
}

}  // namespace deepinfer::cpu
