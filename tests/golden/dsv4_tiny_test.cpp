// DeepSeek V4 against transformers' DeepseekV4ForCausalLM (tests/golden/dsv4_tiny/, from
// tools/golden/make_dsv4_tiny.py): a tiny random model (hidden 32, six layers [sliding, CSA,
// HCA, CSA, HCA, sliding], hash-routed MoE on layers 0-1, shared experts, mHC with 4 streams,
// window 8, compress rates 4 and 8, indexer top-2, YaRN compress rope, float32). The 40-token
// prompt crosses the window and closes ten CSA and five HCA windows; the 24 greedy tokens close
// six and three more.
//
// Which reference: transformers' full-sequence forward (one pass over the whole sequence, every
// window closed inside it). Its cached decode (`generate`) agrees with it to ~6e-6 here
// (golden.json "self_consistency"). The indexer's top-k is a discrete choice, and relu makes
// exact ties (several entries scoring 0) common: the script rejects prompts where any query's
// k-th and (k+1)-th entries score within 1e-4 ("index_min_gap"), since tie-breaking would then
// pick the entries (torch's topk and ours break ties differently; with such a tie our decode
// departed from transformers by 0.5 in a logit).
//
// Tolerance: float32 on both sides with sums in other orders (softmaxes over slots and keys,
// Sinkhorn, the mHC mixes), 1e-4 x (1 + max |logit|). A wrong window, a compressed entry seen
// one token early, a wrong top-k choice or a wrong Sinkhorn orientation moves logits by 1e-2 or
// more here; the greedy steps lead their runner-up by at least 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/quant.h"
#include "core/half.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "golden_logits.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny";
// The second configuration (make_dsv4_tiny.py --variant b): hidden 48, 6 heads in 3 output
// groups, 2 mHC streams and 10 Sinkhorn iterations, layers [CSA, HCA, sliding, CSA, HCA],
// compress rates 2 and 16, window 6, 3 of 6 experts, indexer top-3, YaRN factor 4.
const fs::path kDirB = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny_b";

nlohmann::json golden(const fs::path& dir = kDir) { return testing::read_golden(dir); }

std::pair<double, double> row_error(std::span<const float> ours, const nlohmann::json& ref) {
  return testing::row_error(ours, ref, 1e-4);
}

TEST(DeepseekV4Tiny, GoldenCrossesWindowsAndCompressions) {
  const auto g = golden();
  EXPECT_EQ(g["prompt_ids"].size(), 40u);
  EXPECT_EQ(g["prefill_logits"].size(), 40u);
  EXPECT_GE(g["greedy"].size(), 16u);
  EXPECT_EQ(g["greedy"].size(), g["step_logits"].size());
  EXPECT_GE(g["greedy_min_margin"].get<double>(), 1e-2);
  EXPECT_GE(g["index_min_gap"].get<double>(), 1e-4);
  EXPECT_LT(g["self_consistency"]["generate_max_abs_diff_vs_full_forward"].get<double>(), 1e-4);
  EXPECT_TRUE(g["self_consistency"]["generate_same_ids_as_full_forward_greedy"].get<bool>());
}

// Prefill in chunks of `chunk` tokens (0: the whole prompt at once) with every row's logits,
// each row against the full forward's.
void check_prefill(int64_t chunk, const fs::path& dir = kDir) {
  const auto g = golden(dir);
  auto model = testing::load_model(dir.string());
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

TEST(DeepseekV4Tiny, WholePrefillMatchesTransformers) { check_prefill(0); }
// Chunks that end inside and at CSA (4) and HCA (8) windows and the sliding window (8).
TEST(DeepseekV4Tiny, ChunkedPrefillMatchesTransformers) {
  check_prefill(3);
  check_prefill(5);
  check_prefill(8);
}
// One token at a time: prefill-versus-incremental-decode equivalence at every position.
TEST(DeepseekV4Tiny, TokenByTokenMatchesTransformers) { check_prefill(1); }

void check_greedy(const fs::path& dir) {
  const auto g = golden(dir);
  auto model = testing::load_model(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto greedy = g["greedy"].get<std::vector<int32_t>>();
  for (DType kv : {DType::kF32, DType::kF16}) {
    auto ctx = (*model)->new_context(static_cast<int64_t>(prompt.size() + greedy.size()), kv);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kLast).ok());
    std::vector<int32_t> got;
    for (size_t k = 0; k < greedy.size(); ++k) {
      if (kv == DType::kF32) {
        const auto [err, tol] = row_error((*ctx)->logits(0), g["step_logits"][k]);
        EXPECT_LE(err, tol) << "decode step " << k << " (position " << prompt.size() + k << ")";
      }
      got.push_back(Sampler::argmax((*ctx)->logits(0)));
      ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(&greedy[k], 1), LogitsMode::kLast).ok());
    }
    if (kv == DType::kF32) {
      EXPECT_EQ(got, greedy);
    } else {
      // f16 KV rounds every cached row; most steps still agree.
      int64_t same = 0;
      for (size_t k = 0; k < greedy.size(); ++k) same += got[k] == greedy[k];
      EXPECT_GE(same, static_cast<int64_t>(greedy.size()) / 2);
    }
  }
}

TEST(DeepseekV4Tiny, GreedyDecodeMatchesTransformers) { check_greedy(kDir); }

// The second configuration: whole, in chunks ending inside and at CSA (2) and HCA (16)
// windows and the sliding window (6), token by token, and greedy decoding.
TEST(DeepseekV4TinyB, PrefillWholeChunkedAndTokenByTokenMatchTransformers) {
  const auto g = golden(kDirB);
  EXPECT_EQ(g["prompt_ids"].size(), 52u);
  EXPECT_GE(g["greedy_min_margin"].get<double>(), 1e-2);
  EXPECT_GE(g["index_min_gap"].get<double>(), 1e-4);
  for (int64_t chunk : {0, 1, 3, 7, 16}) check_prefill(chunk, kDirB);
}
TEST(DeepseekV4TinyB, GreedyDecodeMatchesTransformers) { check_greedy(kDirB); }

// Two sequences in one batch, at different positions, each as it would be alone.
TEST(DeepseekV4Tiny, BatchedSequencesAreIndependent) {
  const auto g = golden();
  auto model = testing::load_model(kDir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  constexpr int64_t kBlock = 16, kBlocks = 8;
  auto kv = (*model)->new_kv_cache(kBlock, DType::kF32, kBlocks);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  auto runner = (*model)->new_batch_runner();
  // Sequence A uses blocks 0..3, B blocks 7..4 (scattered), in every group.
  const std::vector<int32_t> table_a = {0, 1, 2, 3}, table_b = {7, 6, 5, 4};
  // Step 1: A prefills 21 tokens, B 13.
  // Step 2: A decodes one, B prefills the rest of its 40.
  const auto seq = [&](int64_t n, int64_t first, const std::vector<int32_t>& table, LogitsMode mode) {
    BatchSequence s;
    s.n_tokens = n;
    s.first_position = first;
    s.logits = mode;
    s.block_tables.fill(table);
    return s;
  };
  std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + 21);
  tokens.insert(tokens.end(), prompt.begin(), prompt.begin() + 13);
  const BatchSequence step1[] = {seq(21, 0, table_a, LogitsMode::kLast), seq(13, 0, table_b, LogitsMode::kLast)};
  ASSERT_TRUE(runner->run(tokens, step1, **kv).ok());
  auto e1 = row_error(runner->logits(0), g["prefill_logits"][20]);
  EXPECT_LE(e1.first, e1.second);
  auto e2 = row_error(runner->logits(1), g["prefill_logits"][12]);
  EXPECT_LE(e2.first, e2.second);
  tokens.assign(prompt.begin() + 21, prompt.begin() + 22);
  tokens.insert(tokens.end(), prompt.begin() + 13, prompt.end());
  const BatchSequence step2[] = {seq(1, 21, table_a, LogitsMode::kLast), seq(27, 13, table_b, LogitsMode::kAll)};
  ASSERT_TRUE(runner->run(tokens, step2, **kv).ok());
  e1 = row_error(runner->logits(0), g["prefill_logits"][21]);
  EXPECT_LE(e1.first, e1.second);
  for (int64_t i = 0; i < 27; ++i) {
    const auto e = row_error(runner->logits(1 + i), g["prefill_logits"][static_cast<size_t>(13 + i)]);
    EXPECT_LE(e.first, e.second) << "sequence B, position " << 13 + i;
  }
}

TEST(DeepseekV4Tiny, KvGroupsDescribeTheState) {
  auto model = testing::load_model(kDir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto groups = (*model)->kv_groups();
  ASSERT_EQ(groups.size(), 7u);
  EXPECT_EQ(groups[0].name, "window");
  EXPECT_EQ(groups[0].kind, KvGroupKind::kSlidingWindow);
  EXPECT_EQ(groups[0].layers.size(), 6u);
  EXPECT_TRUE(groups[0].k_only);
  // The compressed rows and index keys are published to the prefix cache; the window ring and
  // the compressor frontiers are rebuilt by replay after a hit.
  for (const KvGroupSpec& g : groups) EXPECT_EQ(g.prefix_cached(), g.kind == KvGroupKind::kCompressed) << g.name;
  EXPECT_EQ(groups[1].name, "csa_kv");
  EXPECT_EQ(groups[1].tokens_per_row, 4);
  EXPECT_EQ(groups[1].layers, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(groups[5].name, "hca_kv");
  EXPECT_EQ(groups[5].tokens_per_row, 8);
  EXPECT_EQ(groups[5].layers, (std::vector<int32_t>{2, 4}));
}

// A copy of the model directory with config.json edited by `edit` (a regex replacement).
fs::path edited_copy(const std::string& name, const std::string& pattern, const std::string& replacement) {
  const fs::path dir = fs::temp_directory_path() / ("dsv4_bad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kDir / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(kDir / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string changed = std::regex_replace(text, std::regex(pattern), replacement,
                                                 std::regex_constants::format_first_only);
  EXPECT_NE(changed, text) << pattern;
  std::ofstream(dir / "config.json") << changed;
  return dir;
}

TEST(DeepseekV4Tiny, WrongShapeIsOneClearError) {
  const fs::path dir = edited_copy("shape", "\"q_lora_rank\": 24", "\"q_lora_rank\": 20");
  auto model = testing::load_model(dir.string());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.layers.0.attn.wq_a.weight"), std::string::npos)
      << model.status().to_string();
  EXPECT_NE(model.status().message().find("[20, 32]"), std::string::npos) << model.status().to_string();
  fs::remove_all(dir);
}

TEST(DeepseekV4Tiny, MissingTensorIsOneClearError) {
  // Layer 0 as a CSA layer: its compressor's tensors are not in the file.
  const fs::path dir = edited_copy("missing", "\"sliding_attention\"", "\"compressed_sparse_attention\"");
  auto model = testing::load_model(dir.string());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("model.layers.0.attn.compressor.wkv.weight"), std::string::npos)
      << model.status().to_string();
  fs::remove_all(dir);
}

TEST(DeepseekV4Tiny, UnsupportedQuantizationIsRefused) {
  const fs::path dir = edited_copy("quant", "\"model_type\": \"deepseek_v4\"",
                                   "\"model_type\": \"deepseek_v4\", \"quantization_config\": {\"quant_method\": \"awq\"}");
  auto model = testing::load_model(dir.string());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(model.status().message().find("'awq'"), std::string::npos) << model.status().to_string();
  fs::remove_all(dir);
}

// A context of `model` that has run the whole prompt with every row's logits (null on failure,
// which the caller's ASSERT reports).
std::unique_ptr<InferenceContext> prefilled(const Model& model, const std::vector<int32_t>& prompt) {
  auto ctx = model.new_context(64);
  if (!ctx.ok() || !(*ctx)->eval(prompt, LogitsMode::kAll).ok()) return nullptr;
  return std::move(*ctx);
}

bool same_logits(const InferenceContext& a, const InferenceContext& b, int64_t row) {
  const auto la = a.logits(row), lb = b.logits(row);
  return std::equal(la.begin(), la.end(), lb.begin(), lb.end());
}

// The release format (tests/golden/dsv4_fp8/, from tools/golden/make_dsv4_fp8.py): this model's
// weights as DeepSeek ships V4, FP8 e4m3 projections with UE8M0 block scales, FP4 e2m1 experts
// packed two a byte with a scale per 32 inputs, official tensor names. dequantized/ holds the
// same weights multiplied out by the script (exact in BF16). The FP8 projections are multiplied
// out to BF16 and the FP4 experts kept as MXFP4 (17 bytes per 32 weights); both must hold exactly
// the twin's weights: a code read wrong, a nibble swapped or a scale applied to the wrong block
// changes them.
const fs::path kReleaseDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_fp8";

TEST(DeepseekV4Release, Fp8AndFp4WeightsHoldTheDequantizedModelsWeights) {
  auto release = testing::load_model(kReleaseDir.string());
  ASSERT_TRUE(release.ok()) << release.status().to_string();
  auto reference = testing::load_model((kReleaseDir / "dequantized").string());
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  EXPECT_EQ((*release)->source().find("layers.1.attn.wq_a.weight")->dtype, DType::kBF16);
  EXPECT_EQ((*release)->source().find("layers.1.attn.wq_a.scale"), nullptr);
  int n_bf16 = 0, n_mxfp4 = 0;
  for (const TensorView& t : (*release)->source().tensors()) {
    const TensorView* twin = (*reference)->source().find(t.name);
    ASSERT_NE(twin, nullptr) << t.name;
    if (t.dtype == DType::kBF16 && twin->dtype == DType::kBF16) {
      ASSERT_EQ(t.n_bytes, twin->n_bytes) << t.name;
      EXPECT_EQ(std::memcmp(t.data, twin->data, t.n_bytes), 0) << t.name;
      ++n_bf16;
    } else if (t.dtype == DType::kMXFP4) {
      ASSERT_EQ(twin->dtype, DType::kBF16) << t.name;
      const int64_t n = t.n_elements();
      std::vector<float> values(static_cast<size_t>(n));
      cpu::dequantize_row(DType::kMXFP4, t.data, values.data(), n);
      std::vector<uint16_t> want(static_cast<size_t>(n));
      std::memcpy(want.data(), twin->data, want.size() * 2);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(fp32_to_bits(values[static_cast<size_t>(i)]), fp32_to_bits(bf16_to_fp32(want[static_cast<size_t>(i)])))
            << t.name << " element " << i;
      }
      ++n_mxfp4;
    }
  }
  EXPECT_EQ(n_mxfp4, 72);  // the routed experts' gate, up and down
  EXPECT_GE(n_bf16, 50);   // the FP8 projections, and the BF16 tensors as stored
}

// MXFP4 products take float activations (each product exact, as the BF16 twin's) and are summed
// as the plain types are (packed: one chain per output in element order, the f32 panels' chain),
// so the logits are the twin's bit for bit.
TEST(DeepseekV4Release, Fp8AndFp4WeightsGiveTheDequantizedModelsLogits) {
  const auto g = golden();
  auto release = testing::load_model(kReleaseDir.string());
  ASSERT_TRUE(release.ok()) << release.status().to_string();
  auto reference = testing::load_model((kReleaseDir / "dequantized").string());
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  auto a = prefilled(**release, prompt), b = prefilled(**reference, prompt);
  ASSERT_TRUE(a && b);
  for (int64_t row = 0; row < static_cast<int64_t>(prompt.size()); ++row) {
    ASSERT_TRUE(same_logits(*a, *b, row)) << "position " << row;
  }
  for (int step = 0; step < 16; ++step) {
    const int32_t next = Sampler::argmax(a->logits(a->n_logit_rows() - 1));
    ASSERT_EQ(next, Sampler::argmax(b->logits(b->n_logit_rows() - 1))) << "step " << step;
    ASSERT_TRUE(a->eval(std::span<const int32_t>(&next, 1), LogitsMode::kLast).ok());
    ASSERT_TRUE(b->eval(std::span<const int32_t>(&next, 1), LogitsMode::kLast).ok());
    ASSERT_TRUE(same_logits(*a, *b, 0)) << "step " << step;
  }
}

// antirez/ds4's GGUF layout (tests/golden/dsv4_ds4.gguf, from tools/golden/make_dsv4_ds4_gguf.py):
// the same float32 weights under ds4's names and deepseek4.* keys, experts stacked, tid2eid I32.
// It must give the safetensors directory's logits bit for bit, and so transformers' within the
// tolerance above.
TEST(DeepseekV4Ds4Gguf, GivesTheSafetensorsModelsLogits) {
  const auto g = golden();
  auto gguf = testing::load_model((fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_ds4.gguf").string());
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  auto hf = testing::load_model(kDir.string());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*gguf)->config().architecture, "deepseek_v4");
  EXPECT_EQ((*gguf)->kv_groups().size(), (*hf)->kv_groups().size());

  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  auto a = prefilled(**gguf, prompt), b = prefilled(**hf, prompt);
  ASSERT_TRUE(a && b);
  for (int64_t row = 0; row < static_cast<int64_t>(prompt.size()); ++row) {
    ASSERT_TRUE(same_logits(*a, *b, row)) << "position " << row;
    const auto [err, tol] = row_error(a->logits(row), g["prefill_logits"][static_cast<size_t>(row)]);
    EXPECT_LE(err, tol) << "position " << row;
  }
}

// ds4's own tensor types (tests/golden/dsv4_ds4_q8.gguf, make_dsv4_ds4_gguf.py --ds4-types): F16
// embedding, HC fns, compressors, indexer and router, Q8_0 attention, experts and output. They
// load and run through every V4 op, and the logits stay near the float32 file's. Q8_0 rounds
// weights and activations by about 0.5% each, which six layers of mHC and MoE carry to a few
// percent of the largest logit per position (and more where a routing or indexer choice flips:
// 0.19-0.23 at 3 of 40 positions here); a layout or type read wrongly moves every position by
// the logits' whole size.
TEST(DeepseekV4Ds4Gguf, Ds4TypesLoadAndStayNearFloat32) {
  const auto g = golden();
  const fs::path golden_dir = fs::path(DEEPINFER_TEST_DATA) / "golden";
  auto q8 = testing::load_model((golden_dir / "dsv4_ds4_q8.gguf").string());
  ASSERT_TRUE(q8.ok()) << q8.status().to_string();
  auto f32 = testing::load_model((golden_dir / "dsv4_ds4.gguf").string());
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  EXPECT_EQ((*q8)->source().find("embed.weight")->dtype, DType::kF16);
  EXPECT_EQ((*q8)->source().find("layers.1.attn.compressor.ape")->dtype, DType::kF16);
  EXPECT_EQ((*q8)->source().find("layers.1.attn.wq_a.weight")->dtype, DType::kQ8_0);
  EXPECT_EQ((*q8)->source().find("layers.1.ffn.experts.3.w2.weight")->dtype, DType::kQ8_0);

  const auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  auto a = prefilled(**q8, prompt), b = prefilled(**f32, prompt);
  ASSERT_TRUE(a && b);
  std::vector<double> errors;
  for (int64_t row = 0; row < static_cast<int64_t>(prompt.size()); ++row) {
    const auto la = a->logits(row), lb = b->logits(row);
    float scale = 0, err = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      ASSERT_TRUE(std::isfinite(la[i])) << "position " << row;
      scale = std::max(scale, std::fabs(lb[i]));
      err = std::max(err, std::fabs(la[i] - lb[i]));
    }
    errors.push_back(err / (1 + scale));
  }
  std::sort(errors.begin(), errors.end());
  const double median = errors[errors.size() / 2];
  ::testing::Test::RecordProperty("median_rel_err", std::to_string(median));
  EXPECT_LT(median, 0.1);
  EXPECT_LT(errors[errors.size() * 9 / 10], 0.15);
  EXPECT_GT(errors.front(), 0.0) << "the types changed nothing: are they really F16 and Q8_0?";
  EXPECT_EQ(Sampler::argmax(a->logits(0)), Sampler::argmax(b->logits(0)));
}

TEST(DeepseekV4Ds4Gguf, ABrokenLayoutIsOneClearError) {
  // The stacked experts of layer 0's gate projection renamed: the model misses expert 0's w1.
  const fs::path src = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_ds4.gguf";
  const fs::path bad = fs::temp_directory_path() / ("dsv4_ds4_bad_" + std::to_string(::getpid()) + ".gguf");
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "blk.0.ffn_gate_exps.weight", to = "blk.0.ffn_gate_expX.weight";
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
  std::ofstream(bad, std::ios::binary) << bytes;
  auto model = testing::load_model(bad.string());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("layers.0.ffn.experts.0.w1.weight"), std::string::npos)
      << model.status().to_string();

  // A key renamed: the error names the key ds4's layout needs.
  bytes.replace(at, to.size(), from);
  const std::string key = "deepseek4.hash_layer_count";
  const size_t key_at = bytes.find(key);
  ASSERT_NE(key_at, std::string::npos);
  bytes[key_at + key.size() - 1] = 'X';
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes;
  model = testing::load_model(bad.string());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find(key), std::string::npos) << model.status().to_string();
  EXPECT_NE(model.status().message().find("ds4 GGUF layout"), std::string::npos) << model.status().to_string();
  fs::remove(bad);
}

}  // namespace
}  // namespace deepinfer
