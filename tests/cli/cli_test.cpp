// The deepinfer command as a user runs it: real default model, real process, exit codes and
// messages. Needs the default model in the cache (scripts/setup pulls it).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Outcome run(const std::string& args) {
  const std::string err_path = ::testing::TempDir() + "/deepinfer_cli_stderr.txt";
  const std::string cmd = std::string(DEEPINFER_BIN) + " " + args + " 2>" + err_path;
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  o.err.assign(std::istreambuf_iterator<char>(in), {});
  return o;
}

class DefaultModel : public ::testing::Test {
 protected:
  void SetUp() override {
    Outcome o = run("pull --list");
    ASSERT_EQ(o.exit_code, 0) << o.err;
  }
};

TEST_F(DefaultModel, ChatAnswerIsCoherentEnglish) {
  Outcome o = run("run --chat -p \"What is the capital of France?\" --temp 0 -n 32 --threads 2 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  const std::string text = j["text"];
  EXPECT_NE(text.find("Paris"), std::string::npos) << text;
  EXPECT_GT(j["timings"]["prompt_tokens_per_second"].get<double>(), 0.0);
}

TEST_F(DefaultModel, GreedyOutputDoesNotDependOnThreadCount) {
  Outcome a = run("run -p \"The three primary colors are\" --temp 0 -n 16 --threads 1 --json");
  Outcome b = run("run -p \"The three primary colors are\" --temp 0 -n 16 --threads 2 --json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["generated_token_ids"], nlohmann::json::parse(b.out)["generated_token_ids"]);
}

TEST_F(DefaultModel, SeedReproducesSampling) {
  const std::string args = "run -p \"Once upon a time\" --temp 1.0 --top-k 0 --top-p 1 --min-p 0 -n 24 --seed 1234 --json";
  Outcome a = run(args), b = run(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["generated_token_ids"], nlohmann::json::parse(b.out)["generated_token_ids"]);
}

TEST_F(DefaultModel, PromptTokensAndStreamingText) {
  Outcome o = run("run --prompt-tokens 504,3458,282,4649,314 --temp 0 -n 8");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_FALSE(o.out.empty());
  EXPECT_NE(o.err.find("tokens/s"), std::string::npos) << o.err;
}

TEST_F(DefaultModel, ScoreJsonShape) {
  Outcome o = run("score --tokens 504,3458,282,4649,314,260 --top 4 --logits-last --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["positions"].size(), 6u);
  EXPECT_EQ(j["n_vocab"], 49152);
  EXPECT_EQ(j["logits_last"].size(), 49152u);
  for (const auto& p : j["positions"]) {
    ASSERT_EQ(p["top"].size(), 4u);
    EXPECT_EQ(p["argmax"], p["top"][0][0]);
    EXPECT_GE(p["top"][0][1].get<double>(), p["top"][3][1].get<double>());
    if (!p["next_logprob"].is_null()) EXPECT_LE(p["next_logprob"].get<double>(), 0.0);
  }
  EXPECT_TRUE(j["positions"][5]["next_token"].is_null());
}

TEST_F(DefaultModel, GenerateRunsABatchInInputOrder) {
  const std::string in = ::testing::TempDir() + "/deepinfer_generate_in.jsonl";
  {
    std::ofstream f(in);
    f << R"({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0})" << "\n";
    f << "\n";
    f << R"({"prompt_token_ids": [504, 3458, 282, 4649, 314], "max_tokens": 3, "temperature": 0, "ignore_eos": true})" << "\n";
    f << R"({"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0})" << "\n";
  }
  Outcome o = run("generate --input " + in + " --threads 2");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::vector<nlohmann::json> lines;
  size_t pos = 0;
  while (pos < o.out.size()) {
    const size_t nl = o.out.find('\n', pos);
    lines.push_back(nlohmann::json::parse(o.out.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lines[i]["index"], i);
  EXPECT_EQ(lines[1]["generated_token_ids"].size(), 3u);
  EXPECT_EQ(lines[1]["finish_reason"], "length");
  // Same prompt, greedy: same tokens, whether or not the second one hit the prefix cache.
  EXPECT_EQ(lines[0]["generated_token_ids"], lines[2]["generated_token_ids"]);
  EXPECT_NE(lines[0]["text"].get<std::string>().find("Paris"), std::string::npos) << lines[0]["text"];
  EXPECT_NE(o.err.find("generated tokens/s"), std::string::npos) << o.err;

  {
    std::ofstream f(in);
    f << R"({"prompt": "fine"})" << "\n" << "{not json" << "\n";
  }
  o = run("generate --input " + in);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("line 2"), std::string::npos) << o.err;
}

TEST(Cli, UsageErrorsExitTwoWithAMessage) {
  Outcome o = run("run --frobnicate");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--frobnicate"), std::string::npos) << o.err;
  o = run("score --tokens 1,x,3 --json");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("'x'"), std::string::npos) << o.err;
  o = run("nosuchcommand");
  EXPECT_EQ(o.exit_code, 2);
  o = run("run -p hi --temp -1");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("temperature"), std::string::npos) << o.err;
  o = run("run -p hi --kv-cache-dtype q8");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--kv-cache-dtype must be f16 or f32"), std::string::npos) << o.err;
}

TEST(Cli, BadModelFilesGiveOneClearError) {
  const std::string dir = ::testing::TempDir();
  Outcome o = run("run -m " + dir + "/missing.gguf -p hi");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("missing.gguf"), std::string::npos) << o.err;

  const std::string garbage = dir + "/garbage.gguf";
  std::ofstream(garbage, std::ios::binary) << "this is not a model file at all";
  o = run("run -m " + garbage + " -p hi");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("garbage.gguf"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;

  o = run("run -m not-a-known-model -p hi");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("smollm2-135m-instruct"), std::string::npos) << "should list known models: " << o.err;
}

TEST_F(DefaultModel, OutOfVocabularyTokenIsRejected) {
  Outcome o = run("score --tokens 1,49152 --json");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("49152"), std::string::npos) << o.err;
}

// bench ops runs the op harness's perf cases; --filter picks one, and a backend the build lacks
// is a usage error naming the ones it has.
TEST(Cli, BenchOpsTimesTheHarnessCases) {
  Outcome o = run("bench ops --threads 1 --reps 1 --filter 'rms_norm 256x2048'");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("memory bandwidth (triad)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rms_norm"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(" GB/s\n"), std::string::npos) << o.out;
  o = run("bench ops --backend nope");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("cpu-reference"), std::string::npos) << o.err;
  o = run("bench ops --filter no-such-case --reps 1");
  EXPECT_EQ(o.exit_code, 2);
}

}  // namespace
