// `deepinfer generate` with the engine's request parameters, as a user runs it: n, stop strings,
// logprobs, prompt logprobs, penalties, logit_bias and usage in the JSONL results. Needs the
// deepinfer binary (built with the tests in CI) and the default model.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "test_models.h"

namespace deepinfer {
namespace {

std::string run_generate(const std::string& input, int* exit_code) {
  const std::string cmd = std::string(DEEPINFER_BIN) + " generate --threads 2 --input " + input + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *exit_code = pclose(p);
  return out;
}

TEST(GenerateCommand, NewParametersReachTheResults) {
  ASSERT_TRUE(std::filesystem::exists(DEEPINFER_BIN)) << DEEPINFER_BIN << " is missing: build the deepinfer target";
  ASSERT_FALSE(testing::real_model().empty());
  const std::string in = ::testing::TempDir() + "/deepinfer_generate_params.jsonl";
  {
    std::ofstream f(in);
    f << R"({"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "n": 2, "stop": ".",)"
         R"( "logprobs": true, "top_logprobs": 3, "prompt_logprobs": 1, "presence_penalty": 0.5,)"
         R"( "logit_bias": {"28": -2}, "ignore_eos": true})" << "\n";
    f << R"({"prompt_token_ids": [504, 3458, 282], "max_tokens": 4, "temperature": 1, "seed": 5, "logprobs": 0,)"
         R"( "ignore_eos": true, "min_tokens": 2, "stop_token_ids": [2]})" << "\n";
  }
  int code = -1;
  const std::string out = run_generate(in, &code);
  ASSERT_EQ(code, 0) << out;
  std::vector<nlohmann::json> lines;
  for (size_t pos = 0; pos < out.size();) {
    const size_t nl = out.find('\n', pos);
    const std::string line = out.substr(pos, nl - pos);
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
    pos = nl == std::string::npos ? out.size() : nl + 1;
  }
  ASSERT_EQ(lines.size(), 2u) << out;

  const nlohmann::json& a = lines[0];
  ASSERT_EQ(a["outputs"].size(), 2u);
  EXPECT_EQ(a["outputs"][0]["token_ids"], a["outputs"][1]["token_ids"]) << "greedy samples agree";
  for (const auto& o : a["outputs"]) {
    EXPECT_EQ(o["logprobs"].size(), o["token_ids"].size());
    EXPECT_EQ(o["logprobs"][0]["top_logprobs"].size(), 3u);
    if (o["finish_reason"] == "stop") {
      EXPECT_EQ(o["stop_reason"], ".");
      EXPECT_EQ(o["text"].get<std::string>().find('.'), std::string::npos) << o["text"];
    }
  }
  EXPECT_EQ(a["prompt_logprobs"].size(), a["prompt_tokens"]);
  EXPECT_TRUE(a["prompt_logprobs"][0].is_null());
  EXPECT_EQ(a["prompt_logprobs"][1]["top_logprobs"].size(), 1u);
  EXPECT_EQ(a["usage"]["completion_tokens"].get<size_t>(),
            a["outputs"][0]["token_ids"].size() + a["outputs"][1]["token_ids"].size());

  const nlohmann::json& b = lines[1];
  EXPECT_EQ(b["generated_token_ids"].size(), 4u);
  EXPECT_EQ(b["finish_reason"], "length");
  EXPECT_EQ(b["logprobs"][0]["top_logprobs"].size(), 0u);
  EXPECT_EQ(b["usage"]["total_tokens"], 7);
  EXPECT_FALSE(b.contains("outputs"));
}

}  // namespace
}  // namespace deepinfer
