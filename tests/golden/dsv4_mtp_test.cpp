// DeepSeek V4's MTP layer against the reference of tools/golden/make_dsv4_mtp.py
// (tests/golden/dsv4_mtp/): transformers' own V4 block, hyper head and norms composed as vLLM's
// DeepSeekV4MultiTokenPredictorLayer composes them, over the main model of tests/golden/dsv4_tiny
// (six layers, window 8) with one MTP layer added under the release's names (mtp.0.*).
//
// Rows: the MTP row at position p reads the main model's streams at p and the token at p + 1 and
// predicts the token at p + 2; all 63 rows of a 64-token sequence, fed whole, in chunks that
// cross the window (8), and chained on the MTP's own streams as drafting does.
//
// Tolerance as tests/golden/dsv4_tiny_test.cpp: float32 on both sides with sums in other orders,
// 1e-4 x (1 + max |logit|). A row that reads the wrong position's streams, the token at p
// instead of p + 1, the rope at p + 1, no mask at p = 0 or the main model's hyper head moves
// logits by far more.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "golden_logits.h"
#include "model/model.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_mtp";
constexpr int64_t kBlock = 16, kBlocks = 8;

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<backend::KvCache> kv, draft_kv;
  std::unique_ptr<BatchRunner> target;
  std::unique_ptr<DraftHeadRunner> mtp;
  std::vector<int32_t> table = std::vector<int32_t>(kBlocks);
  nlohmann::json golden;
};

void make(Fixture* f) {
  f->golden = testing::read_golden(kDir);
  auto model = testing::load_model(kDir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  f->model = std::move(*model);
  ASSERT_EQ(f->model->draft_kv_groups().size(), 1u);
  auto kv = f->model->new_kv_cache(kBlock, DType::kF32, kBlocks);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  f->kv = std::move(*kv);
  const int64_t n_blocks = kBlocks;
  auto draft_kv = f->model->new_draft_kv_cache(kBlock, DType::kF32, {&n_blocks, 1});
  ASSERT_TRUE(draft_kv.ok()) << draft_kv.status().to_string();
  f->draft_kv = std::move(*draft_kv);
  f->target = f->model->new_batch_runner();
  f->mtp = f->model->new_draft_head_runner(*f->target);
  ASSERT_NE(f->mtp, nullptr);
  std::iota(f->table.begin(), f->table.end(), 0);
}

BatchSequence sequence(const Fixture& f, int64_t first, int64_t n, LogitsMode mode, int n_groups) {
  BatchSequence b;
  b.first_position = first;
  b.n_tokens = n;
  b.logits = mode;
  for (int g = 0; g < n_groups; ++g) b.block_tables[static_cast<size_t>(g)] = f.table;
  return b;
}

// The target over seq[first, first + n), then the MTP rows at those positions that have a next
// token, against the reference's rows.
void run_chunk(Fixture& f, const std::vector<int32_t>& seq, int64_t first, int64_t n, double* worst) {
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const BatchSequence t = sequence(f, first, n, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).subspan(static_cast<size_t>(first), static_cast<size_t>(n)),
                            {&t, 1}, *f.kv)
                  .ok());
  const int64_t last = std::min<int64_t>(first + n - 1, static_cast<int64_t>(seq.size()) - 2);
  if (last < first) return;
  std::vector<int32_t> tokens, rows;
  for (int64_t p = first; p <= last; ++p) {
    tokens.push_back(seq[static_cast<size_t>(p + 1)]);
    rows.push_back(static_cast<int32_t>(p - first));
  }
  const BatchSequence m = sequence(f, first, last - first + 1, LogitsMode::kAll, 1);
  const Status st = f.mtp->run(tokens, rows, DraftHeadRunner::HiddenFrom::kTarget, {&m, 1}, *f.draft_kv);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(f.mtp->n_logit_rows(), last - first + 1);
  for (int64_t p = first; p <= last; ++p) {
    const auto [err, tol] = testing::row_error(f.mtp->logits(p - first), f.golden["mtp_logits"][static_cast<size_t>(p)], 1e-4);
    *worst = std::max(*worst, err);
    EXPECT_LE(err, tol) << "MTP row at position " << p << " (chunks from " << first << ")";
  }
}

void check_rows(int64_t chunk) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  ASSERT_EQ(seq.size(), 64u);
  ASSERT_EQ(f.golden["mtp_logits"].size(), 63u);
  double worst = 0;
  const auto n = static_cast<int64_t>(seq.size());
  const int64_t step = chunk > 0 ? chunk : n;
  for (int64_t first = 0; first < n; first += step) run_chunk(f, seq, first, std::min(step, n - first), &worst);
  ::testing::Test::RecordProperty("max_abs_err", std::to_string(worst));
}

TEST(DeepseekV4Mtp, RowsMatchTheReference) { check_rows(0); }
// Chunks ending inside and at the window (8): the MTP's own KV carried across passes.
TEST(DeepseekV4Mtp, ChunkedRowsMatchTheReference) {
  check_rows(5);
  check_rows(8);
  check_rows(1);
}

// Drafting: after the target's pass over the context, the MTP's last row gives draft 1; each
// further draft is a row on the MTP's own streams and its previous draft.
TEST(DeepseekV4Mtp, ChainedDraftsMatchTheReference) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  const auto n = f.golden["chain_context"].get<int64_t>();
  const auto want = f.golden["chain_tokens"].get<std::vector<int32_t>>();
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const BatchSequence t = sequence(f, 0, n, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).first(static_cast<size_t>(n)), {&t, 1}, *f.kv).ok());
  std::vector<int32_t> tokens, rows;
  for (int64_t p = 0; p + 1 < n; ++p) {
    tokens.push_back(seq[static_cast<size_t>(p + 1)]);
    rows.push_back(static_cast<int32_t>(p));
  }
  BatchSequence m = sequence(f, 0, n - 1, LogitsMode::kLast, 1);
  ASSERT_TRUE(f.mtp->run(tokens, rows, DraftHeadRunner::HiddenFrom::kTarget, {&m, 1}, *f.draft_kv).ok());
  std::vector<int32_t> got;
  int32_t chain_row = static_cast<int32_t>(n - 2);  // the row whose streams the next draft reads
  for (size_t j = 0; j < want.size(); ++j) {
    const auto [err, tol] = testing::row_error(f.mtp->logits(0), f.golden["chain_logits"][j], 1e-4);
    EXPECT_LE(err, tol) << "draft " << j;
    got.push_back(Sampler::argmax(f.mtp->logits(0)));
    const int32_t token = got.back();
    m = sequence(f, n - 1 + static_cast<int64_t>(j), 1, LogitsMode::kLast, 1);
    ASSERT_TRUE(f.mtp->run({&token, 1}, {&chain_row, 1}, DraftHeadRunner::HiddenFrom::kSelf, {&m, 1}, *f.draft_kv).ok());
    chain_row = 0;
  }
  EXPECT_EQ(got, want);
}

TEST(DeepseekV4Mtp, HiddenRowsPastThePassAreRefused) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const BatchSequence t = sequence(f, 0, 4, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).first(4), {&t, 1}, *f.kv).ok());
  const std::vector<int32_t> tokens = {seq[1], seq[2]}, rows = {0, 4};
  const BatchSequence m = sequence(f, 0, 2, LogitsMode::kLast, 1);
  const Status st = f.mtp->run(tokens, rows, DraftHeadRunner::HiddenFrom::kTarget, {&m, 1}, *f.draft_kv);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

TEST(DeepseekV4Mtp, AModelWithoutMtpLayersHasNoDraftHead) {
  auto model = testing::load_model((fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny").string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->draft_kv_groups().empty());
  auto runner = (*model)->new_batch_runner();
  EXPECT_EQ((*model)->new_draft_head_runner(*runner), nullptr);
  const int64_t n_blocks = 4;
  EXPECT_EQ((*model)->new_draft_kv_cache(16, DType::kF32, {&n_blocks, 1}).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace deepinfer
