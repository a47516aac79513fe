#include "core/numpy_random.h"

#include <string>
#include <vector>

namespace deepinfer {

namespace {

// SeedSequence's hashing (numpy/random/bit_generator.pyx), over 32-bit words.
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  value ^= value >> 16;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> 16;
  return result;
}

// SeedSequence(seed).generate_state(8, uint32): the entropy pool, then its words hashed out.
std::array<uint32_t, 8> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  std::array<uint32_t, kPoolSize> pool{};
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[static_cast<size_t>(i)] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[static_cast<size_t>(i)] : 0,
                                           &hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) {
        pool[static_cast<size_t>(dst)] = mix(pool[static_cast<size_t>(dst)], hashmix(pool[static_cast<size_t>(src)], &hash_const));
      }
    }
  }
  for (size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      pool[static_cast<size_t>(dst)] = mix(pool[static_cast<size_t>(dst)], hashmix(entropy[src], &hash_const));
    }
  }
  std::array<uint32_t, 8> state{};
  uint32_t hash_b = kInitB;
  for (size_t i = 0; i < state.size(); ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    v ^= v >> 16;
    state[i] = v;
  }
  return state;
}

constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;

}  // namespace

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  const std::array<uint32_t, 8> w = seed_sequence_state(seed);
  // generate_state(4, uint64): the 32-bit words in pairs, low word first.
  const auto word64 = [&](size_t i) { return static_cast<uint64_t>(w[2 * i]) | (static_cast<uint64_t>(w[2 * i + 1]) << 32); };
  const unsigned __int128 init_state = (static_cast<unsigned __int128>(word64(0)) << 64) | word64(1);
  const unsigned __int128 init_seq = (static_cast<unsigned __int128>(word64(2)) << 64) | word64(3);
  // pcg_setseq_128_srandom_r.
  state_ = 0;
  inc_ = (init_seq << 1) | 1;
  state_ = state_ * kPcgMultiplier + inc_;
  state_ += init_state;
  state_ = state_ * kPcgMultiplier + inc_;
}

uint64_t NumpyPcg64::next_u64() {
  state_ = state_ * kPcgMultiplier + inc_;
  // XSL-RR output.
  const uint64_t xored = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (xored >> rot) | (xored << ((64 - rot) & 63));
}

Result<int64_t> NumpyPcg64::integer_below(int64_t high) {
  if (high <= (int64_t{1} << 32)) {
    return invalid_argument("NumPy-compatible integers below " + std::to_string(high) +
                            " (a range of 2^32 or less) are not supported");
  }
  // Lemire's bounded draw on 64 bits, as random_bounded_uint64 without masking.
  const uint64_t range = static_cast<uint64_t>(high);
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * range;
  auto leftover = static_cast<uint64_t>(m);
  if (leftover < range) {
    const uint64_t threshold = (UINT64_MAX - (range - 1)) % range;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * range;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<int64_t>(m >> 64);
}

}  // namespace deepinfer
