// NumPy's default_rng, bit for bit: values from NumPy 2.4.6 (numpy.random.default_rng(seed):
// bit_generator.random_raw(3) and integers(0, high, size=6, dtype=np.int64)).
#include "core/numpy_random.h"

#include <gtest/gtest.h>

#include <vector>

namespace deepinfer {
namespace {

TEST(NumpyPcg64, RawOutputsMatchNumpy) {
  NumpyPcg64 g(10007);
  EXPECT_EQ(g.next_u64(), 15187255322829266483ULL);
  EXPECT_EQ(g.next_u64(), 959186003677246517ULL);
  EXPECT_EQ(g.next_u64(), 7126631698937927467ULL);
}

TEST(NumpyPcg64, BoundedIntegersMatchNumpy) {
  struct Case {
    uint64_t seed;
    int64_t high;
    std::vector<int64_t> want;
  };
  // The first three: DeepSeek V4.1's Engram bound for its 99,092 token classes.
  const Case cases[] = {
      {10007, 46539438283891, {38316048023122, 2419938046656, 17979836159674, 36993668729195, 19978571768672, 35201700093836}},
      {0, 46539438283891, {29643839136299, 12555722115027, 1906884788502, 769186873658, 37849140105386, 42479131856993}},
      {140098, 46539438283891, {33858405369630, 25755403400457, 15460673601360, 41309613242795, 25183878979268, 18758584732570}},
      {30021, 658812288346769700, {194835936473525715, 577984109460779831, 76993996973654301, 497561768313578154,
                                   308715134173712231, 583677079630730311}},
      // A seed wider than 32 bits (two entropy words).
      {123456789012345, 5000000035000, {2650034857977, 222210472203, 3786804982632, 2360512110810, 3079293425905, 271698019581}},
  };
  for (const Case& c : cases) {
    NumpyPcg64 g(c.seed);
    for (int64_t want : c.want) {
      auto v = g.integer_below(c.high);
      ASSERT_TRUE(v.ok());
      EXPECT_EQ(*v, want) << "seed " << c.seed;
    }
  }
}

TEST(NumpyPcg64, NarrowRangesAreRefused) {
  NumpyPcg64 g(1);
  EXPECT_FALSE(g.integer_below(1000).ok());
}

}  // namespace
}  // namespace deepinfer
