// Running requests through an engine and reading back what speculative decoding tests compare:
// each request's tokens, its draft and accepted counts, and how it finished. Shared by
// speculative_test.cpp and draft_model_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer::testing {

struct SpecOutput {
  std::vector<int32_t> tokens;
  int64_t n_draft = 0;
  int64_t n_accepted = 0;
  FinishReason finish = FinishReason::kNone;
};

inline SpecOutput collect_spec(RequestHandle& h) {
  SpecOutput o;
  while (auto e = h.next()) {
    o.tokens.insert(o.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish != FinishReason::kNone) {
      o.n_draft = e->n_draft_tokens;
      o.n_accepted = e->n_accepted_draft_tokens;
      o.finish = e->finish;
    }
  }
  return o;
}

// All requests submitted at once; outputs in request order. `stats`: the engine's at the end.
inline std::vector<SpecOutput> run_all(const EngineConfig& cfg, const std::vector<GenerationRequest>& requests,
                                       EngineStats* stats = nullptr) {
  auto engine = Engine::create(cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const GenerationRequest& r : requests) {
    auto h = (*engine)->submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (!h.ok()) return {};
    handles.push_back(std::move(h).value());
  }
  std::vector<SpecOutput> out;
  for (auto& h : handles) out.push_back(collect_spec(*h));
  if (stats != nullptr) *stats = (*engine)->stats();
  return out;
}

inline void expect_same_tokens(const std::vector<SpecOutput>& want, const std::vector<SpecOutput>& got,
                               const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(want[i].tokens, got[i].tokens) << what << ": request " << i;
}

}  // namespace deepinfer::testing
