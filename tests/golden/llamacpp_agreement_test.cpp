// Agreement with llama.cpp on the real SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M GGUFs
// (tests/golden/llamacpp/*.json, from tools/golden/make_llamacpp_golden.py).
//
// Both engines read the same quantized weights and quantize activations to Q8_1/Q8_0 the same
// way; what differs is float summation order. That is not as small as it sounds: SmolLM2's
// activations have large outliers, so a last-bit difference can flip the rounding of an 8-bit
// activation and the change cascades through 30 layers. llama.cpp disagrees with itself: the
// same file and text with its default f16 KV cache instead of f32 changes the top-1 token on
// 1.9% of these positions (mean KL 2.9e-3 nats), always where its top two tokens are within
// 0.27 nats. So we require (reference: llama.cpp with f32 KV cache, no flash attention):
//  - top-1 agreement on at least 99% of the positions where llama.cpp's top-1 leads its top-2
//    by at least 0.5 nats (beyond its own noise), and on at least 96% of all positions;
//  - mean KL(llama.cpp || ours) below 5e-3 nats, within twice llama.cpp's own f16/f32 spread.
//    The golden file keeps the reference's top 32 tokens, so KL is taken over those plus one
//    bucket for the rest of the vocabulary (a coarsening, which can only lower KL; the top 32
//    hold nearly all the mass). A real defect (wrong rounding, a RoPE or norm detail, a wrong
//    block layout) costs far more: 1e-2 nats and up, and top-1 agreement well under 90%.
// Gemma 3 270M (1388 positions, one text of 768 tokens running past its 512-token sliding
// window) is noisier in llama.cpp itself: its f16-KV run against this f32-KV reference agrees on
// top-1 at 96.5% of all positions and 99.64% of decisive ones, mean KL 5.0e-3 (measured with
// the generator's settings). We measure 95.9%, 99.64% and 5.1e-3: the same spread. So Gemma
// keeps the 99% decisive bound, and the others become 95% and 1e-2 nats (twice llama.cpp's own
// spread); a wrong window, rope base or norm costs far more. Against transformers running the
// same GGUF dequantized to float32 (no activation quantization), over the 621 positions of the
// short texts, we and llama.cpp agree on top-1 equally often (96.8% and 96.9%) and differ in the
// logprob of its top token by the same amount (0.041 and 0.039 nats): both sit at the same
// distance from the exact computation. Its texts are evaluated in chunks
// of 128 tokens (its 262144-entry vocabulary makes all-position logits of the long text
// 800 MB), which also checks chunked prefill across the window's edge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/catalog.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

struct Reference {
  nlohmann::json golden;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Reference* load_reference(const char* golden_file, const char* model_name) {
  auto* r = new Reference;
  std::ifstream in(fs::path(DEEPINFER_TEST_DATA) / "golden" / "llamacpp" / golden_file);
  r->golden = nlohmann::json::parse(in);
  const KnownModel* known = find_known_model(model_name);
  if (known == nullptr) return r;
  auto model = testing::load_model(cached_model_path(*known));
  if (!model.ok()) return r;
  r->model = std::move(model).value();
  auto tok = Tokenizer::from_metadata(r->model->source().metadata());
  if (tok.ok()) r->tokenizer = std::move(tok).value();
  return r;
}

const Reference& reference() {
  static Reference* ref = load_reference("smollm2_q4_1.json", "smollm2-135m-instruct");
  return *ref;
}

const Reference& gemma3_reference() {
  static Reference* ref = load_reference("gemma3_270m_q4_k_m.json", "gemma3-270m");
  return *ref;
}

std::vector<double> log_softmax(std::span<const float> logits) {
  double m = -INFINITY;
  for (float l : logits) m = std::max<double>(m, l);
  double z = 0;
  for (float l : logits) z += std::exp(l - m);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - m - std::log(z);
  return out;
}

struct Agreement {
  int64_t positions = 0, agree = 0, decisive = 0, decisive_agree = 0;
  double kl_sum = 0, kl_max = 0;

  // One position: our logits against the reference's top tokens.
  void add(std::span<const float> logits, const nlohmann::json& expect) {
    const auto ours = log_softmax(logits);
    int32_t our_argmax = 0;
    for (size_t i = 1; i < ours.size(); ++i) {
      if (ours[i] > ours[static_cast<size_t>(our_argmax)]) our_argmax = static_cast<int32_t>(i);
    }
    const bool same = our_argmax == expect["top"][0][0].get<int32_t>();
    agree += same;
    if (expect["top"][0][1].get<double>() - expect["top"][1][1].get<double>() >= 0.5) {
      ++decisive;
      decisive_agree += same;
    }
    // KL over the reference's top tokens plus a tail bucket.
    double kl = 0, p_top = 0, q_top = 0;
    for (const auto& pair : expect["top"]) {
      const double lp = pair[1].get<double>();
      const double lq = ours[pair[0].get<size_t>()];
      kl += std::exp(lp) * (lp - lq);
      p_top += std::exp(lp);
      q_top += std::exp(lq);
    }
    const double p_tail = std::max(1e-12, 1.0 - p_top), q_tail = std::max(1e-12, 1.0 - q_top);
    kl += p_tail * std::log(p_tail / q_tail);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    ++positions;
  }

  void check(int64_t min_decisive, double min_agreement, double max_mean_kl) const {
    const double agreement = static_cast<double>(agree) / static_cast<double>(positions);
    const double mean_kl = kl_sum / static_cast<double>(positions);
    const double decisive_agreement = static_cast<double>(decisive_agree) / static_cast<double>(decisive);
    std::printf("positions %lld: top-1 agreement %.4f; decisive positions %lld: %.4f; mean KL %.3g, max KL %.3g\n",
                static_cast<long long>(positions), agreement, static_cast<long long>(decisive), decisive_agreement,
                mean_kl, kl_max);
    EXPECT_GE(positions, 300);
    EXPECT_GE(decisive, min_decisive);
    EXPECT_GE(decisive_agreement, 0.99);
    EXPECT_GE(agreement, min_agreement);
    EXPECT_LT(mean_kl, max_mean_kl);
  }
};

// Feeds every case's ids in chunks of `chunk` tokens and scores each position.
void score_cases(const Reference& ref, size_t chunk, Agreement* a) {
  for (const auto& c : ref.golden["cases"]) {
    const Agreement before = *a;
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    auto ctx = ref.model->new_context(static_cast<int64_t>(ids.size()));
    ASSERT_TRUE(ctx.ok());
    const size_t n_scored = c["positions"].size();
    for (size_t begin = 0; begin < ids.size(); begin += chunk) {
      const size_t count = std::min(chunk, ids.size() - begin);
      ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(ids).subspan(begin, count), LogitsMode::kAll).ok());
      for (size_t p = begin; p < begin + count && p < n_scored; ++p) {
        a->add((*ctx)->logits(static_cast<int64_t>(p - begin)), c["positions"][p]);
      }
    }
    std::printf("  %-10s %4lld positions, top-1 agreement %lld, mean KL %.3g\n", c["name"].get<std::string>().c_str(),
                static_cast<long long>(a->positions - before.positions), static_cast<long long>(a->agree - before.agree),
                (a->kl_sum - before.kl_sum) / static_cast<double>(a->positions - before.positions));
  }
}

TEST(LlamaCppAgreement, SmolLM2Q4_1) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.model) << "SmolLM2 is not in the model cache; run `deepinfer pull smollm2-135m-instruct`";
  ASSERT_EQ(ref.golden["model_sha256"], find_known_model("smollm2-135m-instruct")->sha256);
  Agreement a;
  score_cases(ref, SIZE_MAX, &a);
  a.check(500, 0.96, 5e-3);
}

TEST(LlamaCppAgreement, Gemma3_270mQ4_K_M) {
  const Reference& ref = gemma3_reference();
  ASSERT_TRUE(ref.model) << "Gemma 3 270M is not in the model cache; run `deepinfer pull gemma3-270m`";
  ASSERT_EQ(ref.golden["model_sha256"], find_known_model("gemma3-270m")->sha256);
  Agreement a;
  score_cases(ref, 128, &a);
  a.check(1000, 0.95, 1e-2);
}

TEST(LlamaCppAgreement, Gemma3TokenizerGivesTheSameIds) {
  const Reference& ref = gemma3_reference();
  ASSERT_TRUE(ref.tokenizer) << "Gemma 3 270M is not in the model cache; run `deepinfer pull gemma3-270m`";
  for (const auto& c : ref.golden["cases"]) {
    EncodeOptions options;
    options.parse_special = c["special_tokens"].get<bool>();
    options.add_bos = ref.golden["add_bos"].get<bool>();
    EXPECT_EQ(ref.tokenizer->encode(c["text"].get<std::string>(), options), c["ids"].get<std::vector<int32_t>>())
        << c["name"];
  }
}

TEST(LlamaCppAgreement, TokenizerGivesTheSameIds) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.tokenizer) << "SmolLM2 is not in the model cache; run `deepinfer pull smollm2-135m-instruct`";
  for (const auto& c : ref.golden["cases"]) {
    EncodeOptions options;
    options.parse_special = c["special_tokens"].get<bool>();
    options.add_bos = ref.golden["add_bos"].get<bool>();
    EXPECT_EQ(ref.tokenizer->encode(c["text"].get<std::string>(), options), c["ids"].get<std::vector<int32_t>>())
        << c["name"];
  }
}

}  // namespace
}  // namespace deepinfer
