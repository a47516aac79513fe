// A backend that fails a step: the requests of that step end with an error event, the engine
// keeps serving, and the requests after it get exactly the tokens a healthy engine gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "deepinfer/engine.h"
#include "engine/create_engine.h"
#include "sync_hook_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

EngineConfig config_for(bool async) {
  EngineConfig c;
  c.model_path = (fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / "llama_gqa_tied").string();
  c.threads = 2;
  c.async_scheduling = async;
  return c;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

Outcome collect(RequestHandle& h) {
  Outcome o;
  while (auto e = h.next()) {
    o.tokens.insert(o.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish != FinishReason::kNone) {
      o.finish = e->finish;
      o.error = e->error;
    }
  }
  return o;
}

class BackendFailure : public ::testing::TestWithParam<bool> {};

TEST_P(BackendFailure, FailsTheStepsRequestsAndServesTheNext) {
  const std::vector<int32_t> a = {1, 5, 9, 22, 7, 3}, b = {4, 8, 15, 16, 23, 42, 2};
  auto healthy = std::move(Engine::create(config_for(GetParam()))).value();
  const Outcome b_alone = collect(*healthy->submit(greedy(b, 12)).value());
  ASSERT_EQ(b_alone.finish, FinishReason::kLength);

  // The third pass fails: request a has prefilled and decoded once by then.
  auto engine = std::move(create_engine(config_for(GetParam()), [](std::unique_ptr<backend::Backend> inner) {
                            return std::unique_ptr<backend::Backend>(new testing::FailingBackend(std::move(inner), 3));
                          })).value();
  const Outcome failed = collect(*engine->submit(greedy(a, 12)).value());
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_NE(failed.error.find("injected: out of device memory"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find("sync-hook-cpu backend"), std::string::npos) << failed.error;
  EXPECT_LT(failed.tokens.size(), 12u);

  // The engine still serves, with every block of the failed request back in the pool.
  const Outcome next = collect(*engine->submit(greedy(b, 12)).value());
  EXPECT_EQ(next.finish, FinishReason::kLength);
  EXPECT_EQ(next.tokens, b_alone.tokens);
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.n_failed_steps, 1);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.n_running, 0);
}

TEST_P(BackendFailure, EveryRequestOfTheFailedStepEndsAndLaterOnesAreExact) {
  const std::vector<int32_t> a = {1, 5, 9, 22, 7, 3}, b = {4, 8, 15, 16, 23, 42, 2}, c = {11, 12, 13};
  auto healthy = std::move(Engine::create(config_for(GetParam()))).value();
  const Outcome c_alone = collect(*healthy->submit(greedy(c, 10)).value());
  // The first pass fails; a and b were submitted before the engine could start it, or one of
  // them joins a later step: whichever pass each was in, it ends with an error or completes
  // exactly, never both, and never hangs.
  auto engine = std::move(create_engine(config_for(GetParam()), [](std::unique_ptr<backend::Backend> inner) {
                            return std::unique_ptr<backend::Backend>(new testing::FailingBackend(std::move(inner), 1));
                          })).value();
  auto ha = engine->submit(greedy(a, 10)).value();
  auto hb = engine->submit(greedy(b, 10)).value();
  const Outcome oa = collect(*ha), ob = collect(*hb);
  EXPECT_EQ(oa.finish, FinishReason::kError);  // the first pass always holds a
  for (const Outcome* o : {&oa, &ob}) {
    EXPECT_TRUE(o->finish == FinishReason::kError || (o->finish == FinishReason::kLength && o->tokens.size() == 10u));
  }
  const Outcome oc = collect(*engine->submit(greedy(c, 10)).value());
  EXPECT_EQ(oc.finish, FinishReason::kLength);
  EXPECT_EQ(oc.tokens, c_alone.tokens);
  EXPECT_EQ(engine->stats().n_failed_steps, 1);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Scheduling, BackendFailure, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "async" : "sync"; });

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// The scalar reference backend runs whole models through the same engine: the oracle the op
// harness compares kernels with, end to end. Tiny f32 models' greedy tokens agree with the
// fast backend's.
TEST(ReferenceBackend, RunsTheEngineAndAgreesWithTheFastBackend) {
  EngineConfig c = config_for(true);
  auto fast = std::move(Engine::create(c)).value();
  c.backend = "cpu-reference";
  auto reference = std::move(Engine::create(c)).value();
  for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{1, 5, 9, 22, 7, 3}, std::vector<int32_t>{4, 8, 15}}) {
    const Outcome a = collect(*fast->submit(greedy(prompt, 16)).value());
    const Outcome b = collect(*reference->submit(greedy(prompt, 16)).value());
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(b.finish, FinishReason::kLength);
  }
  c.backend = "tpu";
  auto missing = Engine::create(c);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no backend 'tpu'"), std::string::npos) << missing.status().message();
}

}  // namespace
}  // namespace deepinfer
