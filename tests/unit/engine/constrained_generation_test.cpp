// Structured output through the engine on the real default model (SmolLM2-135M, whose tokenizer
// the grammar masks need): constrained generations at temperature 1 always satisfy their
// constraint and end when it is complete; a bad constraint fails submit(); a constrained
// request leaves the unconstrained requests batched with it bitwise unchanged; preemption keeps
// the matcher where the tokens are. One engine serves the suite, so it takes a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <regex>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "model/loader/tensor_source.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int32_t stop_token = -1;
};

Output collect(RequestHandle& h) {
  Output o;
  while (auto e = h.next()) {
    o.tokens.insert(o.tokens.end(), e->tokens.begin(), e->tokens.end());
    o.text += e->text;
    if (e->finish != FinishReason::kNone) {
      o.finish = e->finish;
      o.stop_token = e->stop_token;
    }
  }
  return o;
}

// The default model, batch invariant (a batch's outputs are then comparable run to run).
EngineConfig real_model_config(int32_t threads, int64_t kv_cache_tokens) {
  EngineConfig cfg;
  cfg.model_path = testing::real_model();
  cfg.threads = threads;
  cfg.kv_cache_tokens = kv_cache_tokens;
  cfg.batch_invariant = true;
  return cfg;
}

std::shared_ptr<const Tokenizer> real_tokenizer() {
  auto source = std::move(open_tensor_source(testing::real_model())).value();
  return std::move(Tokenizer::from_metadata(source->metadata())).value();
}

std::unique_ptr<Engine> make_engine(int64_t kv_cache_tokens) {
  if (testing::real_model().empty()) return nullptr;
  return std::move(Engine::create(real_model_config(2, kv_cache_tokens))).value();
}

class ConstrainedGeneration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_ = make_engine(8192).release();
    if (engine_ == nullptr) return;
    tokenizer_ = real_tokenizer();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
    tokenizer_.reset();
  }
  void SetUp() override { ASSERT_NE(engine_, nullptr); }

  static GenerationRequest request(const std::string& prompt, Constraint constraint, uint64_t seed) {
    GenerationRequest r;
    r.prompt = tokenizer_->encode(prompt, {});
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.sampling.constraint = std::move(constraint);
    r.max_tokens = 64;
    return r;
  }

  // Submits one request per seed, all at once (batched), and collects them.
  static std::vector<Output> run(const std::string& prompt, const Constraint& constraint, int n_seeds) {
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int s = 0; s < n_seeds; ++s) {
      handles.push_back(std::move(engine_->submit(request(prompt, constraint, 1000 + s))).value());
    }
    std::vector<Output> out;
    for (auto& h : handles) out.push_back(collect(*h));
    return out;
  }

  static Engine* engine_;
  static std::shared_ptr<const Tokenizer> tokenizer_;
};

Engine* ConstrainedGeneration::engine_ = nullptr;
std::shared_ptr<const Tokenizer> ConstrainedGeneration::tokenizer_;

Constraint regex(std::string text) { return {ConstraintKind::kRegex, std::move(text), {}, false, ""}; }

TEST_F(ConstrainedGeneration, RegexAlwaysMatchesAndEndsWhenComplete) {
  const std::string pattern = "[a-z]{2,5}@[a-z]{2,4}\\.(com|org)";
  for (const Output& o : run("Write an email address:", regex(pattern), 5)) {
    EXPECT_TRUE(std::regex_match(o.text, std::regex(pattern))) << o.text;
    // Complete after "com" or "org": the sequence ends there, with no stop token sampled.
    EXPECT_EQ(o.finish, FinishReason::kStop) << o.text;
    EXPECT_EQ(o.stop_token, -1) << o.text;
  }
}

TEST_F(ConstrainedGeneration, JsonSchemaOutputsValidate) {
  Constraint c;
  c.kind = ConstraintKind::kJsonSchema;
  c.text = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6},
      "age": {"type": "integer", "minimum": 0, "maximum": 99},
      "pet": {"enum": ["cat", "dog", null]}},
    "required": ["name", "age", "pet"], "additionalProperties": false})";
  c.compact_json = true;
  for (const Output& o : run("A person as JSON:", c, 4)) {
    EXPECT_EQ(o.finish, FinishReason::kStop) << o.text;
    const auto j = nlohmann::json::parse(o.text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << o.text;
    EXPECT_EQ(j.size(), 3u) << o.text;
    ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << o.text;
    const std::string name = j["name"].get<std::string>();
    EXPECT_LE(std::count_if(name.begin(), name.end(), [](char b) { return (b & 0xC0) != 0x80; }), 6) << o.text;
    ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << o.text;
    EXPECT_GE(j["age"].get<int64_t>(), 0) << o.text;
    EXPECT_LE(j["age"].get<int64_t>(), 99) << o.text;
    ASSERT_TRUE(j.contains("pet")) << o.text;
    EXPECT_TRUE(j["pet"] == "cat" || j["pet"] == "dog" || j["pet"].is_null()) << o.text;
  }
}

TEST_F(ConstrainedGeneration, ChoiceIsOneOfTheList) {
  // "no" may end or go on to "not sure": there the stop token is allowed, and nothing else ends it.
  const Constraint c{ConstraintKind::kChoice, "", {"yes", "no", "not sure"}, false, ""};
  for (const Output& o : run("Is the sky green? Answer:", c, 5)) {
    EXPECT_TRUE(o.text == "yes" || o.text == "no" || o.text == "not sure") << o.text;
    EXPECT_EQ(o.finish, FinishReason::kStop) << o.text;
  }
}

TEST_F(ConstrainedGeneration, TheGrammarStartsAfterItsMarkerToken) {
  // A reasoning model's answer is constrained after "</think>"; SmolLM2 has no such token, so
  // ":" stands for it (texts over several tokens: constraint_test.cpp). The bias makes ":" the first token (nothing masks it before the marker);
  // after it the grammar binds and masks ":" out, bias or not.
  Constraint c = regex("[0-9]{3}");
  c.start_after = ":";
  const std::optional<int32_t> colon = tokenizer_->find_token(":");
  ASSERT_TRUE(colon.has_value());
  for (uint64_t seed : {1u, 2u, 3u}) {
    GenerationRequest r = request("Pick a number", c, seed);
    r.sampling.logit_bias = {{*colon, 100.0f}};
    const Output o = collect(*std::move(engine_->submit(r)).value());
    EXPECT_TRUE(std::regex_match(o.text, std::regex(":[0-9]{3}"))) << o.text;
    EXPECT_EQ(o.finish, FinishReason::kStop) << o.text;
  }
  // Until the marker comes, the text is free: a story, not digits.
  c.start_after = "{";
  GenerationRequest story = request("Once upon a time", c, 7);
  story.max_tokens = 12;
  const Output free_text = collect(*std::move(engine_->submit(story)).value());
  const std::string before = free_text.text.substr(0, free_text.text.find('{'));
  EXPECT_TRUE(std::any_of(before.begin(), before.end(), [](char b) { return std::isalpha(static_cast<unsigned char>(b)); }))
      << free_text.text;
}

// Fast-forward: forced text (the keys and the constant of this schema) is drafted and verified
// in one pass. The model's own samples decide every token, so the tokens are those of plain
// constrained decoding, greedy and seeded alike, in fewer steps.
TEST(ConstrainedFastForward, SameTokensInFewerSteps) {
  Constraint c;
  c.kind = ConstraintKind::kJsonSchema;
  c.text = R"({"type": "object", "properties": {
      "temperature_in_celsius": {"type": "integer", "minimum": -50, "maximum": 50},
      "observation_station": {"const": "Oslo-Blindern"},
      "precipitation_expected": {"type": "boolean"}},
    "required": ["temperature_in_celsius", "observation_station", "precipitation_expected"],
    "additionalProperties": false})";
  c.compact_json = true;
  struct Run {
    std::vector<Output> outputs;
    int64_t steps = 0;
    int64_t forced_accepted = 0;  // forced-text draft tokens kept ("grammar" method)
  };
  auto run = [&](bool fast_forward) {
    EngineConfig cfg = real_model_config(2, 4096);
    cfg.grammar_fast_forward = fast_forward;
    // Every forced token verified: the step count must not depend on measured step times.
    cfg.speculative.schedule = SpeculativeSchedule::kFixed;
    auto engine = std::move(Engine::create(cfg)).value();
    auto tokenizer = real_tokenizer();
    Run out;
    for (const float temperature : {0.0f, 1.0f}) {
      GenerationRequest r;
      r.prompt = tokenizer->encode("The weather in Oslo as JSON:", {});
      r.sampling.temperature = temperature;
      r.sampling.seed = 42;
      r.sampling.constraint = c;
      r.max_tokens = 64;
      out.outputs.push_back(collect(*std::move(engine->submit(r)).value()));
    }
    const EngineStats stats = engine->stats();
    out.steps = stats.n_steps;
    for (const SpeculativeMethodUsage& m : stats.speculative.methods) {
      if (m.method == "grammar") out.forced_accepted = m.accepted_tokens;
    }
    return out;
  };
  const Run plain = run(false);
  const Run fast = run(true);
  for (size_t i = 0; i < plain.outputs.size(); ++i) {
    EXPECT_EQ(fast.outputs[i].tokens, plain.outputs[i].tokens) << fast.outputs[i].text << "\n" << plain.outputs[i].text;
    EXPECT_EQ(fast.outputs[i].finish, FinishReason::kStop) << fast.outputs[i].text;
    const auto j = nlohmann::json::parse(fast.outputs[i].text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << fast.outputs[i].text;
    EXPECT_EQ(j["observation_station"], "Oslo-Blindern");
  }
  std::printf("steps: %lld token by token, %lld with fast-forward\n", static_cast<long long>(plain.steps),
              static_cast<long long>(fast.steps));
  EXPECT_LT(fast.steps * 2, plain.steps) << "the keys and the constant take one pass each";
  EXPECT_GT(fast.forced_accepted, 20);
  EXPECT_EQ(plain.forced_accepted, 0);
}

// Masks computed while the forward pass runs (EngineConfig::overlap_masks) are the masks the
// sampler would have computed: a batch of constrained requests gives the same tokens with and
// without the overlap, with asynchronous scheduling (where the overlap happens). One thread, so
// that a core is spare and the engine overlaps (on a one-core machine both runs are the same).
TEST(ConstrainedOverlap, MasksComputedDuringThePassGiveTheSameTokens) {
  auto run = [](bool overlap) {
    EngineConfig cfg = real_model_config(1, 8192);
    cfg.async_scheduling = true;
    cfg.overlap_masks = overlap;
    auto engine = std::move(Engine::create(cfg)).value();
    auto tokenizer = real_tokenizer();
    Constraint c;
    c.kind = ConstraintKind::kJsonSchema;
    c.text = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
        "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3}}, "required": ["name", "tags"],
        "additionalProperties": false})";
    c.compact_json = true;
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int s = 0; s < 6; ++s) {
      GenerationRequest r;
      r.prompt = tokenizer->encode(s % 2 ? "A record:" : "JSON please:", {});
      r.sampling.temperature = 1.0f;
      r.sampling.seed = 77 + static_cast<uint64_t>(s);
      r.sampling.constraint = c;
      r.max_tokens = 48;
      handles.push_back(std::move(engine->submit(std::move(r))).value());
    }
    std::vector<Output> out;
    for (auto& h : handles) out.push_back(collect(*h));
    return out;
  };
  if (testing::real_model().empty()) GTEST_SKIP() << "the default model is not in the cache";
  const std::vector<Output> with = run(true), without = run(false);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(with[i].tokens, without[i].tokens) << with[i].text << " | " << without[i].text;
    EXPECT_EQ(with[i].finish, FinishReason::kStop) << with[i].text;
  }
}

TEST_F(ConstrainedGeneration, BadConstraintsFailSubmit) {
  const auto submit = [](Constraint c) { return engine_->submit(request("Hi", std::move(c), 1)).status(); };
  const Status unbalanced = submit(regex("(abc"));
  EXPECT_EQ(unbalanced.code(), StatusCode::kInvalidArgument) << unbalanced.message();
  EXPECT_NE(unbalanced.message().find("constraint"), std::string::npos) << unbalanced.message();
  const Status refused_keyword = submit({ConstraintKind::kJsonSchema, R"({"not": {"required": ["a"]}})", {}, false, ""});
  EXPECT_EQ(refused_keyword.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused_keyword.message().find("not"), std::string::npos) << refused_keyword.message();
  const Status undefined_rule = submit({ConstraintKind::kGbnf, "root ::= greeting", {}, false, ""});
  EXPECT_EQ(undefined_rule.code(), StatusCode::kInvalidArgument) << undefined_rule.message();
  EXPECT_EQ(submit({ConstraintKind::kChoice, "", {}, false, ""}).code(), StatusCode::kInvalidArgument);
  const Status huge = submit(regex("((a{1000}){1000}){1000}"));
  // The request's fault, not the server's load: INVALID_ARGUMENT (a 400), never a 429 to retry.
  EXPECT_EQ(huge.code(), StatusCode::kInvalidArgument) << huge.message();
  EXPECT_NE(huge.message().find("too large"), std::string::npos) << huge.message();
  EXPECT_EQ(engine_->stats().n_running + engine_->stats().n_waiting, 0) << "nothing was queued";
}

TEST_F(ConstrainedGeneration, UnconstrainedNeighboursAreUnchanged) {
  std::vector<GenerationRequest> plain;
  for (int i = 0; i < 2; ++i) {
    GenerationRequest r = request("Once upon a time, number " + std::to_string(i), {}, 50 + i);
    r.max_tokens = 8;
    r.sampling.ignore_eos = true;
    plain.push_back(r);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const GenerationRequest& r : plain) alone.push_back(collect(*std::move(engine_->submit(r)).value()).tokens);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<std::shared_ptr<RequestHandle>> constrained;
  for (size_t i = 0; i < plain.size(); ++i) {
    constrained.push_back(std::move(engine_->submit(request("Digits:", regex("[0-9]{12}"), 7 + i))).value());
    handles.push_back(std::move(engine_->submit(plain[i])).value());
  }
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(collect(*handles[i]).tokens, alone[i]) << "request " << i;
    EXPECT_TRUE(std::regex_match(collect(*constrained[i]).text, std::regex("[0-9]{12}")));
  }
}

// Preemption recomputes a request's KV from its tokens and samples nothing again: the matcher,
// which followed the sampled tokens, stays right, and the outputs are those of a roomy cache.
TEST_F(ConstrainedGeneration, PreemptionKeepsTheMatcherRight) {
  auto tight = make_engine(64);  // four blocks: two sequences of 20-odd tokens fill it
  ASSERT_NE(tight, nullptr);
  const std::string pattern = "[a-z]{2,5}( [a-z]{2,5}){3} [0-9]{6}";
  std::vector<std::shared_ptr<RequestHandle>> roomy_h, tight_h;
  for (int s = 0; s < 4; ++s) {
    GenerationRequest r = request("Four words and a number:", regex(pattern), 300 + s);
    r.max_tokens = 40;
    roomy_h.push_back(std::move(engine_->submit(r)).value());
    tight_h.push_back(std::move(tight->submit(r)).value());
  }
  for (size_t i = 0; i < roomy_h.size(); ++i) {
    const Output want = collect(*roomy_h[i]);
    const Output got = collect(*tight_h[i]);
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_EQ(want.finish, FinishReason::kStop);
    EXPECT_TRUE(std::regex_match(want.text, std::regex(pattern))) << want.text;
  }
  EXPECT_GT(tight->stats().n_preemptions, 0) << "the cache was meant to be too small for all four";
}

}  // namespace
}  // namespace deepinfer
