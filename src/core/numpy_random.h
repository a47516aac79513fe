// NumPy's default generator (numpy.random.default_rng(seed): SeedSequence, PCG64) and its
// Generator.integers for wide int64 ranges, bit for bit: a model whose constants a reference
// drew from NumPy (DeepSeek V4.1's Engram hash multipliers) gets the same ones.
#pragma once

#include <array>
#include <cstdint>

#include "deepinfer/status.h"

namespace deepinfer {

class NumpyPcg64 {
 public:
  // default_rng(seed) for a non-negative integer seed.
  explicit NumpyPcg64(uint64_t seed);

  uint64_t next_u64();  // bit_generator.random_raw()

  // integers(0, high, dtype=int64) for one value; high - 1 must exceed 2^32 - 1 (NumPy draws
  // narrower ranges from 32-bit halves, which this does not reproduce).
  Result<int64_t> integer_below(int64_t high);

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
};

}  // namespace deepinfer
