// The deepinfer command as a user runs it: real default model, real process, exit codes and
// messages. Needs the default model in the cache (scripts/setup pulls it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <map>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

Outcome run(const std::string& args) {
  // One file per process: ctest runs the tests of this binary in parallel processes.
  const std::string err_path = ::testing::TempDir() + "/deepinfer_cli_stderr_" + std::to_string(::getpid()) + ".txt";
  const std::string cmd = std::string(DEEPINFER_BIN) + " " + args + " 2>" + err_path;
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  {
    std::ifstream in(err_path);
    o.err.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::remove(err_path.c_str());
  return o;
}

class DefaultModel : public ::testing::Test {
 protected:
  void SetUp() override {
    Outcome o = run("pull --list");
    ASSERT_EQ(o.exit_code, 0) << o.err;
  }
};

// --chat renders with the model's chat template. SmolLM2's adds its own system message when
// there is none; with that one, this 4-bit 135M model misses France's capital (it answers
// "L'Étoile, la Marseillaise, ..."), so France is asked with a system message of our own.
TEST_F(DefaultModel, ChatAnswerIsCoherentEnglish) {
  Outcome o = run("run --chat -p \"What is the capital of Germany?\" --temp 0 -n 32 --threads 2 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  std::string text = j["text"];
  EXPECT_NE(text.find("Berlin"), std::string::npos) << text;
  EXPECT_GT(j["timings"]["prompt_tokens_per_second"].get<double>(), 0.0);

  o = run("run --chat --system \"You are a helpful assistant.\" -p \"What is the capital of France?\" --temp 0 -n 32 "
          "--threads 2 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  text = nlohmann::json::parse(o.out)["text"];
  EXPECT_NE(text.find("Paris"), std::string::npos) << text;
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
    if (!p["next_logprob"].is_null()) {
      EXPECT_LE(p["next_logprob"].get<double>(), 0.0);
    }
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

  // Out-of-range and mistyped fields are errors naming the field, never truncated (top_k 2^32
  // was read as 0) nor answered in the JSON library's words.
  for (const char* bad : {R"("top_k": 4294967296)", R"("max_tokens": 3.5)", R"("temperature": "x")",
                          R"("stop": [1])", R"("logprobs": 100)"}) {
    {
      std::ofstream f(in);
      f << R"({"prompt": "fine", )" << bad << "}\n";
    }
    o = run("generate --input " + in);
    EXPECT_EQ(o.exit_code, 2) << bad;
    const std::string field = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    EXPECT_NE(o.err.find(field), std::string::npos) << o.err;
    EXPECT_EQ(o.err.find("json.exception"), std::string::npos) << o.err;
  }
}

// Structured output in batch jobs: the fields /v1/completions reads, each line its own grammar,
// and a bad grammar an error naming its line.
TEST_F(DefaultModel, GenerateFollowsEachLinesStructuredOutput) {
  const std::string in = ::testing::TempDir() + "/deepinfer_generate_structured.jsonl";
  {
    std::ofstream f(in);
    f << R"({"prompt": "Phone:", "max_tokens": 12, "seed": 1, "response_format": {"type": "regex", "regex": "[0-9]{3}-[0-9]{4}"}})" << "\n";
    f << R"({"prompt": "Pick:", "max_tokens": 5, "seed": 2, "structured_outputs": {"choice": ["left", "right"]}})" << "\n";
    f << R"({"prompt": "Person:", "max_tokens": 40, "seed": 3, "guided_json": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false}})" << "\n";
  }
  Outcome o = run("generate --input " + in + " --threads 2");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::vector<nlohmann::json> lines;
  for (size_t pos = 0; pos < o.out.size();) {
    const size_t nl = o.out.find('\n', pos);
    lines.push_back(nlohmann::json::parse(o.out.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  ASSERT_EQ(lines.size(), 3u);
  const std::string phone = lines[0]["text"];
  EXPECT_EQ(phone.size(), 8u) << phone;
  for (size_t i = 0; i < phone.size(); ++i) EXPECT_TRUE(i == 3 ? phone[i] == '-' : std::isdigit(static_cast<unsigned char>(phone[i]))) << phone;
  EXPECT_TRUE(lines[1]["text"] == "left" || lines[1]["text"] == "right") << lines[1]["text"];
  const nlohmann::json person = nlohmann::json::parse(lines[2]["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(person.is_object()) << lines[2]["text"];
  EXPECT_TRUE(person.size() == 1 && person["n"].is_number_integer()) << person;
  {
    std::ofstream f(in);
    f << R"({"prompt": "x", "regex": "(ab"})" << "\n";
  }
  o = run("generate --input " + in);
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("constraint"), std::string::npos) << o.err;
}

// The default model's chat template (with its default system message), several turns, /reset
// and /exit, lines from a file as from a pipe. --stats reports each prompt's size: the second
// turn's prompt holds the first turn (longer, and its blocks come from the prefix cache), the
// one after /reset does not.
TEST_F(DefaultModel, ChatHoldsAConversationFromStdin) {
  const std::string in = ::testing::TempDir() + "/deepinfer_chat_in.txt";
  {
    std::ofstream f(in);
    f << "What is the capital of Germany?\n\nAnd what did I just ask you?\n/reset\nWhat is 2 plus 2?\n/exit\n"
      << "this line is never read\n";
  }
  Outcome o = run("chat --temp 0 -n 24 --threads 2 --stats < " + in);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("Berlin"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("> "), std::string::npos) << "no prompt when stdin is not a terminal: " << o.out;
  struct Turn {
    int prompt, cached, reply;
  };
  std::vector<Turn> turns;
  const std::regex stats(R"(prompt: (\d+) tokens \((\d+) cached\) \| reply: (\d+) tokens)");
  for (std::sregex_iterator it(o.err.begin(), o.err.end(), stats), end; it != end; ++it) {
    turns.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3])});
  }
  ASSERT_EQ(turns.size(), 3u) << o.err;  // the empty line is skipped, nothing after /exit runs
  for (const Turn& t : turns) EXPECT_GT(t.reply, 0);
  EXPECT_GT(turns[1].prompt, turns[0].prompt + turns[0].reply / 2) << o.err;
  EXPECT_GE(turns[1].cached, turns[0].prompt / 16 * 16) << "turn 2 starts with turn 1's prompt: " << o.err;
  EXPECT_LT(turns[2].prompt, turns[1].prompt) << "/reset forgets: " << o.err;
  EXPECT_LT(turns[2].cached, turns[0].prompt) << o.err;
  EXPECT_NE(o.err.find("forgotten"), std::string::npos) << o.err;
}

TEST_F(DefaultModel, BenchModelGoesThroughTheEngine) {
  Outcome o = run("bench model --prompt 32 --gen 4 --reps 1 --threads 2");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("prefill: 32 tokens"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("decode:  3 tokens"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("decode bound:"), std::string::npos) << o.out;
}

// The 256 byte tokens of GPT-2's byte-level alphabet, no merges: a tokenizer.json that covers
// exactly the vocabulary of the tiny test models with 256 tokens.
std::string byte_level_tokenizer_json() {
  std::vector<int> bytes, chars;
  for (int b = 0; b < 256; ++b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
      bytes.push_back(b);
      chars.push_back(b);
    }
  }
  for (int b = 0, n = 0; b < 256; ++b) {
    if (std::find(bytes.begin(), bytes.end(), b) == bytes.end()) {
      bytes.push_back(b);
      chars.push_back(256 + n++);
    }
  }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int c = chars[i];  // below 0x800: one or two bytes of UTF-8
    std::string utf8 = c < 0x80 ? std::string(1, static_cast<char>(c))
                                : std::string{static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    vocab[utf8] = bytes[i];
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                     {"use_regex", true}};
  return nlohmann::json{{"version", "1.0"},
                        {"added_tokens", nlohmann::json::array()},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", byte_level},
                        {"post_processor", nullptr},
                        {"decoder", byte_level},
                        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}}
      .dump();
}

// A Hugging Face directory with tokenizer.json: run takes text, as with a GGUF file.
TEST(Cli, RunTakesTextForAHuggingFaceDirectory) {
  const fs::path tiny = fs::path(DEEPINFER_TEST_DATA) / "golden/tiny/llama_gqa_tied";
  const fs::path dir = fs::path(::testing::TempDir()) / "deepinfer_cli_hf_dir";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(tiny / "config.json", dir / "config.json");
  fs::copy_file(tiny / "model.safetensors", dir / "model.safetensors");
  std::ofstream(dir / "tokenizer.json") << byte_level_tokenizer_json();

  Outcome text = run("run -m " + dir.string() + " -p hello -n 8 --temp 0 --threads 2 --json");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  auto j = nlohmann::json::parse(text.out);
  EXPECT_EQ(j["prompt_token_ids"], nlohmann::json({104, 101, 108, 108, 111}));  // the bytes of "hello"
  EXPECT_EQ(j["generated_token_ids"].size(), 8u);
  EXPECT_TRUE(j["text"].is_string());
  Outcome ids = run("run -m " + dir.string() + " --prompt-tokens 104,101,108,108,111 -n 8 --temp 0 --json");
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(nlohmann::json::parse(ids.out)["generated_token_ids"], j["generated_token_ids"]);

  // Without tokenizer.json the directory still runs from token ids, and says why text cannot.
  fs::remove(dir / "tokenizer.json");
  Outcome none = run("run -m " + dir.string() + " -p hello -n 2");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("carries no tokenizer"), std::string::npos) << none.err;
}

// Every command that runs a model takes the same engine flags and rejects a bad value by name,
// before loading anything.
TEST(Cli, EngineFlagsAreTheSameInEveryCommand) {
  for (const std::string command :
       {"run -p hi", "chat", "score --tokens 1,2 --json", "generate --input x.jsonl", "serve", "bench model"}) {
    for (const std::string flag : {"--threads -1", "--max-num-seqs 0", "--max-num-batched-tokens 0",
                                   "--kv-cache-tokens -5", "--block-size 0", "--kv-cache-dtype q8"}) {
      Outcome o = run(command + " " + flag);
      EXPECT_EQ(o.exit_code, 2) << command << " " << flag << ": " << o.err;
      const std::string name = flag.substr(0, flag.find(' '));
      EXPECT_NE(o.err.find(name), std::string::npos) << command << " " << flag << ": " << o.err;
    }
    Outcome help = run(command.substr(0, command.find(' ')) + (command.rfind("bench", 0) == 0 ? " model" : "") +
                       " --help");
    EXPECT_EQ(help.exit_code, 0) << command;
    for (const char* flag : {"--threads", "--kv-cache-tokens", "--max-num-batched-tokens", "--no-prefix-caching",
                             "--batch-invariant", "--no-async-scheduling", "--no-swa-replay", "--block-size"}) {
      EXPECT_NE(help.out.find(flag), std::string::npos) << command << " --help lacks " << flag;
    }
  }
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
  // A stray word is an error, not ignored (a flag's value the shell split off, say).
  for (const std::string command : {"run -p hi", "score --tokens 1,2 --json", "generate --input x.jsonl", "serve",
                                    "render", "parse", "router --replica 127.0.0.1:1"}) {
    o = run(command + " stray");
    EXPECT_EQ(o.exit_code, 2) << command;
    EXPECT_NE(o.err.find("unexpected argument 'stray'"), std::string::npos) << command << ": " << o.err;
  }
}

// --draft-model: a known name or path, implying the draft method; without a model the method
// is a usage error, and a draft with another tokenizer one clear error at load.
TEST_F(DefaultModel, DraftModelFlags) {
  Outcome o = run("run -p hi -n 4 --speculative-method draft");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--draft-model"), std::string::npos) << o.err;
  o = run("run -p hi -n 4 --draft-model " + ::testing::TempDir() + "/missing-draft.gguf");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("missing-draft.gguf"), std::string::npos) << o.err;
  o = run("run -p hi -n 4 --draft-model gemma3-270m");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("share the target's tokenizer"), std::string::npos) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  o = run("run -p 'The days of the week are' -n 24 --temp 0 --draft-model smollm2-135m-instruct");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const Outcome plain = run("run -p 'The days of the week are' -n 24 --temp 0");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(o.out, plain.out);
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
  EXPECT_NE(o.out.find("measured peak, 1 threads: "), std::string::npos) << o.out;
  // The case's line: its rate and its share of the limit (the triad, for a memory-bound op).
  const size_t at = o.out.find("rms_norm");
  ASSERT_NE(at, std::string::npos) << o.out;
  const std::string line = o.out.substr(at, o.out.find('\n', at) - at);
  EXPECT_NE(line.find(" GB/s"), std::string::npos) << line;
  EXPECT_EQ(line.back(), '%') << line;
  o = run("bench ops --backend nope");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("cpu-reference"), std::string::npos) << o.err;
  o = run("bench ops --filter no-such-case --reps 1");
  EXPECT_EQ(o.exit_code, 2);
}

}  // namespace

// bench grammar over three MaskBench-format files of our own: one JSON line per schema with
// exactly MaskBench's fields, then the summary; the unsupported keyword is a named error.
TEST_F(DefaultModel, BenchGrammarJudgesInstancesAndTimesMasks) {
  const std::string jsonl = ::testing::TempDir() + "/bench_grammar_" + std::to_string(::getpid()) + ".jsonl";
  Outcome o = run("bench grammar --data " + std::string(DEEPINFER_TEST_DATA) + "/cli/data/grammar_bench --jsonl " + jsonl);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::ifstream in(jsonl);
  std::map<std::string, nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line);
    std::vector<std::string> keys;
    for (auto it = row.begin(); it != row.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"compiled", "error", "file", "invalid_rejected", "invalid_total", "n_masks",
                                              "tbm_max_us", "tbm_p50_us", "tbm_p99_us", "tbm_us", "ttfm_us",
                                              "valid_accepted", "valid_total"}));
    rows[row["file"]] = row;
  }
  std::remove(jsonl.c_str());
  ASSERT_EQ(rows.size(), 3u);
  for (const char* f : {"person.json", "tree.json"}) {
    const auto& r = rows[f];
    EXPECT_TRUE(r["compiled"].get<bool>()) << r;
    EXPECT_EQ(r["valid_accepted"], r["valid_total"]) << r;
    EXPECT_EQ(r["invalid_rejected"], r["invalid_total"]) << r;
    EXPECT_EQ(r["n_masks"].get<size_t>(), r["tbm_us"].size());
    EXPECT_GT(r["ttfm_us"].get<double>(), 0.0);
  }
  EXPECT_EQ(rows["person.json"]["invalid_total"], 3);
  EXPECT_FALSE(rows["unsupported.json"]["compiled"].get<bool>());
  EXPECT_NE(rows["unsupported.json"]["error"].get<std::string>().find("'not'"), std::string::npos);
  const auto summary = nlohmann::json::parse(o.out)["summary"];
  EXPECT_EQ(summary["schemas"], 3);
  EXPECT_EQ(summary["passing"], 2);
  EXPECT_EQ(summary["invalid_accepted"], 0);
}

// `run --kv-store` writes pages; `kvstore stat`, `verify` and `gc` read, check and prune them.
TEST_F(DefaultModel, KvStoreCommandsStatVerifyAndCollect) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("deepinfer_cli_kvstore_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string text;
  for (int i = 0; i < 8; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  Outcome o = run("run -p '" + text + "' -n 2 --temp 0 --kv-store " + dir.string() + " --kv-store-page-tokens 16");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  o = run("kvstore stat " + dir.string());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto stat = nlohmann::json::parse(o.out);
  const int64_t pages = stat["pages"];
  EXPECT_GE(pages, 2);
  EXPECT_EQ(stat["models"].size(), 1u);
  EXPECT_EQ(stat["since_last_use"]["<1h"], pages);
  o = run("kvstore verify " + dir.string());
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["ok"], pages);
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".page") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(e.path()) / 2));
    f.put('\x42');
    break;
  }
  o = run("kvstore verify --remove " + dir.string());
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(nlohmann::json::parse(o.out)["bad"].size(), 1u) << o.out;
  EXPECT_EQ(nlohmann::json::parse(o.out)["removed"], 1);
  o = run("kvstore gc --capacity 1 " + dir.string());
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["evicted"], pages - 1);
  EXPECT_EQ(nlohmann::json::parse(run("kvstore stat " + dir.string()).out)["pages"], 0);
  fs::remove_all(dir);
  for (const std::string flag : {"--kv-store-ttl 5x", "--kv-store-memory 3Q", "--kv-store-capacity -1",
                                 "--kv-store-page-tokens 0"}) {
    o = run("run -p hi " + flag);
    EXPECT_EQ(o.exit_code, 2) << flag << ": " << o.err;
    EXPECT_NE(o.err.find(flag.substr(0, flag.find(' '))), std::string::npos) << flag << ": " << o.err;
  }
  EXPECT_EQ(run("kvstore frob " + dir.string()).exit_code, 2);
}
