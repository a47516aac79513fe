#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/mapped_file.h"
#include "core/page_buffer.h"
#include "core/sha256.h"
#include "core/thread_pool.h"
#include "deepinfer/status.h"

namespace deepinfer {
namespace {

TEST(Status, ResultCarriesValueOrError) {
  Result<int> good = 3;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  Result<int> bad = not_found("no such tensor 'x'");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(bad.status().to_string(), "NOT_FOUND: no such tensor 'x'");
}

Result<int> twice(Result<int> in) {
  DI_ASSIGN_OR_RETURN(int v, std::move(in));
  return v * 2;
}

TEST(Status, AssignOrReturnPropagates) {
  EXPECT_EQ(*twice(4), 8);
  EXPECT_EQ(twice(data_loss("cut")).status().code(), StatusCode::kDataLoss);
}

TEST(Half, Fp16RoundTripsAndKnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7c00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
}

TEST(Half, Bf16) {
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f808000)), 0x3f80);  // tie to even
  EXPECT_EQ(fp32_to_bf16(fp32_from_bits(0x3f818000)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
}

TEST(DType, TableMatchesGgufBlockSizes) {
  EXPECT_EQ(dtype_traits(DType::kQ4_0)->block_bytes, 18u);
  EXPECT_EQ(dtype_traits(DType::kQ4_1)->block_bytes, 20u);
  EXPECT_EQ(dtype_traits(DType::kQ8_0)->block_bytes, 34u);
  EXPECT_EQ(dtype_traits(DType::kQ4_K)->block_bytes, 144u);
  EXPECT_EQ(dtype_traits(DType::kQ6_K)->block_bytes, 210u);
  EXPECT_EQ(dtype_traits(DType::kQ2_K)->block_bytes, 84u);
  EXPECT_EQ(dtype_traits(DType::kQ3_K)->block_bytes, 110u);
  EXPECT_EQ(dtype_traits(DType::kQ5_K)->block_bytes, 176u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_1, 576), 18u * 20u);
  EXPECT_FALSE(dtype_from_ggml_id(4).has_value());  // removed Q4_2
  EXPECT_FALSE(dtype_from_ggml_id(99).has_value());
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
}

// Threads that spin beside a pool until destroyed, so that its workers get descheduled.
class BusyThreads {
 public:
  explicit BusyThreads(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        while (!stop_.load()) {
        }
      });
    }
  }
  ~BusyThreads() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST(ThreadPool, CoversEveryIndexOnceWithGrainAlignedRanges) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<bool> aligned{true};
      pool.parallel_for(
          n,
          [&](int, int64_t b, int64_t e) {
            if (b % 8 != 0) aligned = false;
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          },
          8);
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
      EXPECT_TRUE(aligned.load());
    }
  }
}

TEST(ThreadPool, UsesSeveralThreadsAndSurvivesManyCalls) {
  ThreadPool pool(2);
  std::atomic<int> seen_mask{0};
  for (int rep = 0; rep < 2000; ++rep) {
    pool.parallel_for(2, [&](int tid, int64_t, int64_t) { seen_mask |= 1 << tid; });
  }
  EXPECT_EQ(seen_mask.load(), 3);
}

// Whoever runs a range (its worker, or the caller when the worker has not started it), it runs
// once per call with that range's thread index and bounds. Many short calls, with busy threads
// beside the pool so that its workers are descheduled and the caller takes their ranges.
TEST(ThreadPool, EveryRangeRunsOnceWithItsIndexWhoeverRunsIt) {
  BusyThreads busy(2);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 3000; ++rep) {
      const int64_t n = 1 + rep % 97;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<std::atomic<int64_t>> first_of_index(static_cast<size_t>(threads));
      for (auto& f : first_of_index) f.store(-1);
      pool.parallel_for(n, [&](int tid, int64_t b, int64_t e) {
        ASSERT_EQ(first_of_index[static_cast<size_t>(tid)].exchange(b), -1) << "index " << tid << " ran twice";
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n;
      // The static split: index i starts at i * n / threads, rounded as run_range rounds.
      int64_t start = 0;
      for (int i = 0; i < threads; ++i) {
        const int64_t count = n / threads + (i < n % threads ? 1 : 0);
        if (count > 0) {
          ASSERT_EQ(first_of_index[static_cast<size_t>(i)].load(), start) << "index " << i;
        }
        start += count;
      }
    }
  }
}

// parallel_chunks: every chunk once, on chunk bounds, no two threads at once in one thread's
// scratch, each thread's chunks in increasing order; mixed with parallel_for calls (whose
// ranges a late worker must not confuse with chunks) and with busy threads beside the pool.
TEST(ThreadPool, ParallelChunksRunsEveryChunkOnceWhoeverIsFree) {
  BusyThreads busy(2);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 2000; ++rep) {
      const int64_t n = 1 + rep % 89, chunk = 1 + rep % 7;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::vector<std::atomic<int>> inside(static_cast<size_t>(threads));
      std::vector<int64_t> last(static_cast<size_t>(threads), -1);
      std::atomic<bool> ok{true};
      pool.parallel_chunks(n, chunk, [&](int tid, int64_t b, int64_t e) {
        if (inside[static_cast<size_t>(tid)].fetch_add(1) != 0) ok = false;
        if (b % chunk != 0 || e != std::min(n, b + chunk) || b <= last[static_cast<size_t>(tid)]) ok = false;
        last[static_cast<size_t>(tid)] = b;
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        inside[static_cast<size_t>(tid)].fetch_sub(1);
      });
      ASSERT_TRUE(ok.load()) << "n " << n << " chunk " << chunk << ", " << threads << " threads";
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n << " chunk " << chunk;
      std::vector<std::atomic<int>> again(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) again[static_cast<size_t>(i)]++;
      });
      for (auto& h : again) ASSERT_EQ(h.load(), 1) << "parallel_for after chunks, n " << n;
    }
  }
}

// Committing a buffer's pages keeps what it holds: zeros where nothing was written, the bytes
// written elsewhere (a server prefaults its KV cache once, but nothing relies on "before use").
TEST(PageBuffer, PrefaultKeepsTheContents) {
  auto buffer = PageBuffer::allocate(size_t{5} << 20);
  ASSERT_TRUE(buffer.ok());
  uint8_t* p = buffer->data();
  for (size_t i = 0; i < 1000; ++i) p[i * 4099 % buffer->size()] = static_cast<uint8_t>(i % 251 + 1);
  std::vector<uint8_t> before(p, p + buffer->size());
  buffer->prefault();
  EXPECT_TRUE(std::equal(before.begin(), before.end(), p));
  EXPECT_EQ(p[buffer->size() - 1], 0);
  PageBuffer empty;
  empty.prefault();  // nothing to commit
}

TEST(MappedFile, MapsAndReportsMissing) {
  const std::string path = ::testing::TempDir() + "/deepinfer_map_test.bin";
  {
    std::ofstream(path, std::ios::binary) << "hello";
  }
  auto f = MappedFile::open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->data()), 5), "hello");
  auto missing = MappedFile::open(path + ".nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = MappedFile::open(::testing::TempDir());
  EXPECT_FALSE(dir.ok());
}

TEST(Sha256, KnownVectors) {
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string path = ::testing::TempDir() + "/deepinfer_sha_test.bin";
  {
    std::ofstream(path, std::ios::binary) << "abc";
  }
  EXPECT_EQ(*sha256_file_hex(path), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace deepinfer
