// Real chat templates rendered byte for byte as transformers renders them
// (tests/golden/templates/*.json, written by tools/golden/make_template_golden.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "recipe/chat_template.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const fs::path kDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "templates";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// First differing byte, with context, so a failure says where the outputs part.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t k = 0;
  while (k < want.size() && k < got.size() && want[k] == got[k]) ++k;
  size_t from = k > 40 ? k - 40 : 0;
  return "at byte " + std::to_string(k) + "\n  want: ..." + want.substr(from, 80) + "\n  got:  ..." + got.substr(from, 80);
}

std::vector<fs::path> golden_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kDir)) {
    // snippets.json holds the interpreter's feature cases (jinja_snippets_test.cpp).
    if (entry.path().extension() == ".json" && entry.path().filename() != "snippets.json") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Whatever the template does around it, each user message's text reaches the output inside
// untrusted pieces only (real templates copy it whole).
void expect_user_text_untrusted(const ChatTemplate& tmpl, const ChatTemplateInput& input, const std::string& where) {
  auto pieces = tmpl.render_pieces(input);
  ASSERT_TRUE(pieces.ok()) << where;
  for (const Json& m : input.messages) {
    if (m["role"] != "user" || !m["content"].is_string() || m["content"].get<std::string>().empty()) continue;
    const std::string text = m["content"].get<std::string>();
    bool found = false;
    for (const TemplatePiece& p : *pieces) {
      if (!p.trusted && p.text.find(text) != std::string::npos) found = true;
    }
    // Templates may trim the text; then its trimmed form must be there.
    if (!found) {
      size_t b = text.find_first_not_of(" \t\n\r"), e = text.find_last_not_of(" \t\n\r");
      std::string trimmed = b == std::string::npos ? "" : text.substr(b, e - b + 1);
      for (const TemplatePiece& p : *pieces) {
        if (!p.trusted && !trimmed.empty() && p.text.find(trimmed) != std::string::npos) found = true;
      }
    }
    EXPECT_TRUE(found) << where << ": user text not in one untrusted piece: " << text;
  }
}

TEST(ChatTemplateGolden, EnoughTemplatesAndCases) {
  // Some templates refuse most conversations (Hermes 2 Pro needs tools, Gemma 2 has no system
  // role); they stay for the constructs they exercise, but do not count towards the five.
  size_t well_covered = 0;
  for (const fs::path& f : golden_files()) {
    Json golden = Json::parse(read_file(f));
    size_t rendered = 0;
    for (const Json& c : golden["cases"]) rendered += c.contains("expected");
    well_covered += rendered >= 20;
  }
  EXPECT_GE(well_covered, 5u) << "expected at least 5 templates with 20 rendered conversations in " << kDir;
}

TEST(ChatTemplateGolden, RendersLikeTransformers) {
  size_t checked = 0;
  for (const fs::path& f : golden_files()) {
    Json golden = Json::parse(read_file(f));
    std::string name = golden["template"].get<std::string>();
    auto tmpl = ChatTemplate::parse(read_file(kDir / name));
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status().message();
    for (const Json& c : golden["cases"]) {
      ChatTemplateInput input;
      input.messages = c["messages"];
      input.tools = c["tools"];
      input.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      input.extra = c["extra"];
      input.bos_token = golden["bos_token"].get<std::string>();
      input.eos_token = golden["eos_token"].get<std::string>();
      input.now = std::chrono::system_clock::from_time_t(golden["now_unix"].get<int64_t>());
      auto out = tmpl->render(input);
      std::string where = name + " " + c["name"].get<std::string>();
      if (c.contains("error")) {
        ASSERT_FALSE(out.ok()) << where << ": rendered but transformers refused with " << c["error"];
        EXPECT_NE(out.status().message().find(c["error"].get<std::string>()), std::string::npos)
            << where << ": " << out.status().message();
      } else {
        ASSERT_TRUE(out.ok()) << where << ": " << out.status().message();
        const std::string want = c["expected"].get<std::string>();
        EXPECT_EQ(*out, want) << where << " differs " << first_difference(want, *out);
        expect_user_text_untrusted(*tmpl, input, where);
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 100u);
}

}  // namespace
}  // namespace deepinfer::recipe
