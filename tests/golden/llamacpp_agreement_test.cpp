// Agreement with llama.cpp on the real SmolLM2-135M-Instruct Q4_1 GGUF
// (tests/golden/llamacpp/smollm2_q4_1.json, from tools/golden/make_llamacpp_golden.py).
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
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/catalog.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

struct Reference {
  nlohmann::json golden;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

const Reference& reference() {
  static Reference* ref = [] {
    auto* r = new Reference;
    std::ifstream in(fs::path(DEEPINFER_TEST_DATA) / "golden" / "llamacpp" / "smollm2_q4_1.json");
    r->golden = nlohmann::json::parse(in);
    const KnownModel* known = find_known_model("smollm2-135m-instruct");
    if (known == nullptr) return r;
    auto model = Model::load(cached_model_path(*known));
    if (!model.ok()) return r;
    r->model = std::move(model).value();
    auto tok = Tokenizer::from_metadata(r->model->source().metadata());
    if (tok.ok()) r->tokenizer = std::move(tok).value();
    return r;
  }();
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

TEST(LlamaCppAgreement, SmolLM2Q4_1) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.model) << "SmolLM2 is not in the model cache; run `deepinfer pull smollm2-135m-instruct`";
  ASSERT_EQ(ref.golden["model_sha256"], find_known_model("smollm2-135m-instruct")->sha256);
  ThreadPool pool(2);
  int64_t positions = 0, agree = 0, decisive = 0, decisive_agree = 0;
  double kl_sum = 0, kl_max = 0;
  for (const auto& c : ref.golden["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    auto ctx = ref.model->new_context(static_cast<int64_t>(ids.size()));
    ASSERT_TRUE(ctx.ok());
    ASSERT_TRUE((*ctx)->eval(ids, LogitsMode::kAll, pool).ok());
    for (size_t p = 0; p < c["positions"].size(); ++p) {
      const auto& expect = c["positions"][p];
      const auto ours = log_softmax((*ctx)->logits(static_cast<int64_t>(p)));
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
  }
  const double agreement = static_cast<double>(agree) / static_cast<double>(positions);
  const double mean_kl = kl_sum / static_cast<double>(positions);
  const double decisive_agreement = static_cast<double>(decisive_agree) / static_cast<double>(decisive);
  std::printf("positions %lld: top-1 agreement %.4f; decisive positions %lld: %.4f; mean KL %.3g, max KL %.3g\n",
              static_cast<long long>(positions), agreement, static_cast<long long>(decisive), decisive_agreement,
              mean_kl, kl_max);
  EXPECT_GE(positions, 300);
  EXPECT_GE(decisive, 500);
  EXPECT_GE(decisive_agreement, 0.99);
  EXPECT_GE(agreement, 0.96);
  EXPECT_LT(mean_kl, 5e-3);
}

TEST(LlamaCppAgreement, TokenizerGivesTheSameIds) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.tokenizer) << "SmolLM2 is not in the model cache; run `deepinfer pull smollm2-135m-instruct`";
  for (const auto& c : ref.golden["cases"]) {
    EncodeOptions options;
    options.parse_special = c["special_tokens"].get<bool>();
    EXPECT_EQ(ref.tokenizer->encode(c["text"].get<std::string>(), options), c["ids"].get<std::vector<int32_t>>())
        << c["name"];
  }
}

}  // namespace
}  // namespace deepinfer
