// DeepSeek V4.1 against NVIDIA NeMo Automodel's DeepseekV41ForCausalLM (tests/golden/dsv41_tiny/,
// from tools/golden/make_dsv41_tiny.py; transformers has no V4.1): a tiny random model (hidden
// 32, eight layers with compress ratios [0, 0, 2, 2, 2, 1, 1, 1], KV sources 2 and 5, index
// sources 2, 4, 5, 7, candidate source 5 with blocks of 2 and 3 kept, single-pass mHC, MoE with
// a biased router and a shared expert, window 8, indexer top-3, float32). The release's cache
// round trips are in the reference's forward: FP8 window rows, NVFP4 compressed rows, MXFP4
// index queries and keys.
//
// Which reference: NeMo's full-sequence forward (it has no cached decode). The script rejects
// prompts whose top-k choices (index entries, candidate blocks) come within 3e-4 of a tie and
// whose greedy steps lead by less than 1e-2.
//
// Tolerance: float32 on both sides with sums in other orders, 1e-4 x (1 + max |logit|), as for
// V4. A round trip's rounding is a step function: a value that lands within float32 noise of a
// rounding boundary may round the other way here, which moves a logit by far less than the
// tolerance on this model (measured: max error ~1e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/dsv4_ops.h"
#include "engine/sampler.h"
#include "tokenizer/engram_classes.h"
#include "model/model.h"
#include "golden_logits.h"
#include "test_backend.h"
#include "tokenizer_load_options.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv41_tiny";

nlohmann::json golden() { return testing::read_golden(kDir); }

// With the tokenizer's Engram classes, as the engine loads it.
Result<std::unique_ptr<Model>> load(const fs::path& dir) {
  return Model::load(dir.string(), testing::test_backend(), testing::tokenizer_load_options(dir.string()));
}

std::pair<double, double> row_error(std::span<const float> ours, const nlohmann::json& ref) {
  return testing::row_error(ours, ref, 1e-4);
}

TEST(DeepseekV41Tiny, GoldenHasClearChoices) {
  const auto g = golden();
  EXPECT_EQ(g["prompt_ids"].size(), 40u);
  EXPECT_EQ(g["prefill_logits"].size(), 40u);
  EXPECT_GE(g["greedy"].size(), 16u);
  EXPECT_EQ(g["greedy"].size(), g["step_logits"].size());
  EXPECT_GE(g["greedy_min_margin"].get<double>(), 1e-2);
  EXPECT_GE(g["topk_min_gap"].get<double>(), 3e-4);
}

// The cache formats' round trips, bit for bit against NeMo's quantize_cache on values over many
// binades, with exact e2m1 and e4m3 midpoints among them (ties to even).
TEST(DeepseekV41Tiny, CacheRoundTripsMatchNemoBitForBit) {
  const auto g = golden();
  const std::pair<const char*, backend::CacheFormat> formats[] = {
      {"fp8", backend::CacheFormat::kFp8E4M3}, {"mxfp4", backend::CacheFormat::kMxfp4}, {"nvfp4", backend::CacheFormat::kNvfp4}};
  for (const auto& [name, format] : formats) {
    const auto& f = g["cache_round_trips"][name];
    const int64_t block = f["block"].get<int64_t>();
    for (size_t r = 0; r < f["x"].size(); ++r) {
      std::vector<float> x = f["x"][r].get<std::vector<float>>();
      const std::vector<float> want = f["y"][r].get<std::vector<float>>();
      cpu::cache_round_trip_row(x.data(), static_cast<int64_t>(x.size()), format, block);
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(x[i], want[i]) << name << " row " << r << " element " << i << " of " << f["x"][r][i];
      }
    }
  }
}

// The tiny vocabulary's Engram classes (its texts fold together every way the normaliser folds)
// against NeMo's _compressed_token_map over Hugging Face's tokenizers.
TEST(DeepseekV41Tiny, EngramClassesMatchNemo) {
  auto tok = Tokenizer::from_hf_dir(kDir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  int64_t n = 0;
  const std::vector<int32_t> classes = engram_token_classes(**tok, &n);
  EXPECT_EQ(classes, golden()["engram_token_classes"].get<std::vector<int32_t>>());
  EXPECT_LT(n, 128);  // the vocabulary's variants did fold
}

TEST(DeepseekV41Tiny, EngramWithoutTheTokenizerIsAClearError) {
  auto model = testing::load_model(kDir.string());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("token classes"), std::string::npos) << model.status().to_string();
}

// Prefill in chunks of `chunk` tokens (0: the whole prompt at once) with every row's logits,
// each row against the full forward's.
void check_prefill(int64_t chunk) {
  const auto g = golden();
  auto model = load(kDir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  auto ctx = (*model)->new_context(64);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : prompt.size();
  double worst = 0;
  for (size_t begin = 0; begin < prompt.size(); begin += step) {
    const size_t n = std::min(step, prompt.size() - begin);
    ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(prompt).subspan(begin, n), LogitsMode::kAll).ok());
    ASSERT_EQ((*ctx)->n_logit_rows(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const auto [err, tol] = row_error((*ctx)->logits(static_cast<int64_t>(i)), g["prefill_logits"][begin + i]);
      worst = std::max(worst, err);
      EXPECT_LE(err, tol) << "chunk " << chunk << ", position " << begin + i;
    }
  }
  ::testing::Test::RecordProperty("max_abs_err", std::to_string(worst));
}

TEST(DeepseekV41Tiny, WholePrefillMatchesNemo) { check_prefill(0); }
// Chunks that end inside and at ratio-2 pairs, candidate blocks and the window (8).
TEST(DeepseekV41Tiny, ChunkedPrefillMatchesNemo) {
  check_prefill(3);
  check_prefill(5);
  check_prefill(8);
}
// One token at a time: a ratio-2 entry's first token waits in the compressor state.
TEST(DeepseekV41Tiny, TokenByTokenMatchesNemo) { check_prefill(1); }

TEST(DeepseekV41Tiny, GreedyDecodeMatchesNemo) {
  const auto g = golden();
  auto model = load(kDir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = g["greedy"].get<std::vector<int32_t>>();
  auto ctx = (*model)->new_context(static_cast<int64_t>(prompt.size() + greedy.size()), DType::kF32);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kLast).ok());
  std::vector<int32_t> got;
  for (size_t k = 0; k < greedy.size(); ++k) {
    const auto [err, tol] = row_error((*ctx)->logits(0), g["step_logits"][k]);
    EXPECT_LE(err, tol) << "decode step " << k << " (position " << prompt.size() + k << ")";
    got.push_back(Sampler::argmax((*ctx)->logits(0)));
    ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(&greedy[k], 1), LogitsMode::kLast).ok());
  }
  EXPECT_EQ(got, greedy);
}

// DSpark's draft layers against NeMo's DeepseekV41DSparkModel: the target's features of the
// context (in passes of `chunk` tokens, each observed), then one block per anchor (several
// anchors batched in one draft call when `batched`): every slot's logits (with the Markov bias of
// the greedy chain), the drafts and the confidence logits.
void check_dspark(int64_t chunk, bool batched) {
  const auto g = golden();
  LoadOptions options = testing::tokenizer_load_options(kDir.string());
  options.draft_layers = true;
  auto model = Model::load(kDir.string(), testing::test_backend(), options);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto seq = [&] {
    auto s = g["prompt_ids"].get<std::vector<int32_t>>();
    const auto more = g["greedy"].get<std::vector<int32_t>>();
    s.insert(s.end(), more.begin(), more.end());
    return s;
  }();
  const auto& cases = g["dspark"];
  ASSERT_GE(cases.size(), 3u);
  constexpr int64_t kBlock = 16, kBlocksPerSeq = 5;
  const auto n_seq = static_cast<int64_t>(cases.size());
  auto kv = (*model)->new_kv_cache(kBlock, DType::kF32, kBlocksPerSeq * n_seq);
  auto draft_kv = (*model)->new_draft_kv_cache(kBlock, DType::kF32, std::vector<int64_t>{kBlocksPerSeq * n_seq});
  ASSERT_TRUE(kv.ok() && draft_kv.ok());
  auto runner = (*model)->new_batch_runner();
  auto drafter = (*model)->new_block_draft_runner(*runner);
  ASSERT_NE(drafter, nullptr);
  EXPECT_EQ(drafter->block_size(), 5);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(n_seq));
  for (int64_t i = 0; i < n_seq; ++i) {
    for (int64_t b = 0; b < kBlocksPerSeq; ++b) tables[static_cast<size_t>(i)].push_back(static_cast<int32_t>(i * kBlocksPerSeq + b));
  }
  const auto sequence = [&](int64_t i, int64_t n, int64_t first) {
    BatchSequence s;
    s.n_tokens = n;
    s.first_position = first;
    s.logits = LogitsMode::kNone;
    s.block_tables.fill(tables[static_cast<size_t>(i)]);
    s.lookback = std::span<const int32_t>(seq).subspan(static_cast<size_t>(std::max<int64_t>(0, first - 3)),
                                                         static_cast<size_t>(std::min<int64_t>(3, first)));
    return s;
  };
  // The context of every case, its chunks batched across cases.
  std::vector<int64_t> done(static_cast<size_t>(n_seq), 0);
  for (bool more = true; more;) {
    more = false;
    std::vector<int32_t> tokens, rows;
    std::vector<BatchSequence> batch;
    for (int64_t i = 0; i < n_seq; ++i) {
      const int64_t anchor = cases[static_cast<size_t>(i)]["anchor"].get<int64_t>();
      const int64_t first = done[static_cast<size_t>(i)], n = std::min(chunk, anchor - first);
      if (n <= 0) continue;
      for (int64_t t = 0; t < n; ++t) {
        rows.push_back(static_cast<int32_t>(tokens.size()));
        tokens.push_back(seq[static_cast<size_t>(first + t)]);
      }
      batch.push_back(sequence(i, n, first));
      done[static_cast<size_t>(i)] += n;
      more = true;
    }
    if (!more) break;
    ASSERT_TRUE(runner->run(tokens, batch, **kv).ok());
    ASSERT_TRUE(drafter->observe(rows, batch, **draft_kv).ok());
  }
  const auto check = [&](std::span<const int64_t> which) {
    std::vector<int32_t> anchors;
    std::vector<BatchSequence> blocks;
    for (int64_t i : which) {
      const int64_t anchor = cases[static_cast<size_t>(i)]["anchor"].get<int64_t>();
      anchors.push_back(seq[static_cast<size_t>(anchor)]);
      blocks.push_back(sequence(i, 5, anchor));
    }
    ASSERT_TRUE(drafter->draft(anchors, blocks, **draft_kv).ok());
    for (size_t j = 0; j < which.size(); ++j) {
      const auto& c = cases[static_cast<size_t>(which[j])];
      const auto drafts = drafter->drafts(static_cast<int64_t>(j));
      EXPECT_EQ(std::vector<int32_t>(drafts.begin(), drafts.end()), c["drafts"].get<std::vector<int32_t>>())
          << "anchor " << c["anchor"];
      for (int64_t k = 0; k < 5; ++k) {
        const auto [err, tol] = row_error(drafter->logits(static_cast<int64_t>(j), k), c["logits"][static_cast<size_t>(k)]);
        EXPECT_LE(err, tol) << "anchor " << c["anchor"] << ", slot " << k;
        const double want = c["confidence"][static_cast<size_t>(k)].get<double>();
        EXPECT_NEAR(drafter->confidence(static_cast<int64_t>(j))[static_cast<size_t>(k)], want, 1e-4 * (1 + std::fabs(want)))
            << "anchor " << c["anchor"] << ", slot " << k;
      }
    }
  };
  if (batched) {
    std::vector<int64_t> all(static_cast<size_t>(n_seq));
    std::iota(all.begin(), all.end(), 0);
    check(all);
  } else {
    for (int64_t i = 0; i < n_seq; ++i) check(std::span<const int64_t>(&i, 1));
  }
}

TEST(DeepseekV41Tiny, DsparkDraftsMatchNemo) { check_dspark(64, false); }
// Context in passes of 3 tokens (the draft layers' window rows written across passes), and all
// anchors' blocks in one draft pass.
TEST(DeepseekV41Tiny, DsparkDraftsInChunksAndBatchesMatchNemo) { check_dspark(3, true); }

TEST(DeepseekV41Tiny, DsparkLayersLoadOnlyWhenAskedFor) {
  auto model = load(kDir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->draft_kv_groups().empty());
  auto runner = (*model)->new_batch_runner();
  EXPECT_EQ((*model)->new_block_draft_runner(*runner), nullptr);
}

TEST(DeepseekV41Tiny, KvGroupsHoldOnlyTheSourcesCompressedRows) {
  auto model = load(kDir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->config().architecture, "deepseek_v41");
  const auto groups = (*model)->kv_groups();
  ASSERT_EQ(groups.size(), 6u);
  EXPECT_EQ(groups[0].name, "window");
  EXPECT_EQ(groups[0].layers.size(), 8u);
  const auto find = [&](const std::string& name) {
    const auto it = std::ranges::find(groups, name, &KvGroupSpec::name);
    EXPECT_NE(it, groups.end()) << name;
    return it == groups.end() ? KvGroupSpec{} : *it;
  };
  EXPECT_EQ(find("csa2_kv_r2").layers, (std::vector<int32_t>{2}));
  EXPECT_EQ(find("csa2_kv_r2").tokens_per_row, 2);
  EXPECT_EQ(find("csa2_index_r2").head_dim, 32);
  EXPECT_EQ(find("csa2_state_r2").kind, KvGroupKind::kCompressorState);
  EXPECT_EQ(find("csa2_state_r2").window, 2);
  EXPECT_EQ(find("csa2_kv_r1").layers, (std::vector<int32_t>{5}));
  EXPECT_EQ(find("csa2_kv_r1").tokens_per_row, 1);
  EXPECT_EQ(find("csa2_index_r1").layers, (std::vector<int32_t>{5}));
  for (const KvGroupSpec& g : groups) EXPECT_EQ(g.prefix_cached(), g.kind == KvGroupKind::kCompressed) << g.name;
}

// A copy of the model directory with config.json edited (a regex replacement).
fs::path edited_copy(const std::string& name, const std::string& pattern, const std::string& replacement) {
  const fs::path dir = fs::temp_directory_path() / ("dsv41_bad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(kDir / f, dir / f);
  std::ifstream in(kDir / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string changed =
      std::regex_replace(text, std::regex(pattern), replacement, std::regex_constants::format_first_only);
  EXPECT_NE(changed, text) << pattern;
  std::ofstream(dir / "config.json") << changed;
  return dir;
}

void expect_load_error(const fs::path& dir, const std::string& needle) {
  auto model = load(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(needle), std::string::npos) << model.status().to_string();
  fs::remove_all(dir);
}

TEST(DeepseekV41Tiny, BadSchedulesAreClearErrors) {
  // A compressed layer before any KV source of its ratio.
  expect_load_error(edited_copy("no_source", R"("kv_source_layer_ids": \[\s*2,)", R"("kv_source_layer_ids": [)"),
                    "no preceding KV source");
  // A window-only layer listed as an index source.
  expect_load_error(
      edited_copy("window_index", R"("index_source_layer_ids": \[)", R"("index_source_layer_ids": [0, )"),
      "compress ratio 0");
  // A tokenizer whose Engram classes are not the ones the checkpoint was hashed with.
  expect_load_error(edited_copy("classes", R"("engram_compressed_vocab_size": \d+)", R"("engram_compressed_vocab_size": 99092)"),
                    "Engram token classes");
  // A table size that is not the checkpoint's.
  expect_load_error(edited_copy("table", R"("engram_num_embeddings": \[\s*300)", R"("engram_num_embeddings": [100)"),
                    "DeepSeek V4.1 with this config.json needs [100, 16]");
  // A renamed tensor of a source layer's compressor.
  const fs::path dir = fs::temp_directory_path() / ("dsv41_missing_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(kDir / f, dir / f);
  std::ifstream in(kDir / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "layers.5.attn.indexer.wk.weight", to = "layers.5.attn.indexer.wx.weight";
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  expect_load_error(dir, "layers.5.attn.indexer.wk.weight");
}

}  // namespace
}  // namespace deepinfer
