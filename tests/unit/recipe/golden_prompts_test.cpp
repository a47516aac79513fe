// Byte-for-byte comparison with deepseek-recipe 0.2.0 on tests/golden/recipe/prompts.json
// (made by tools/golden/make_recipe_golden.py): every conversation, rendered by our V4 / V4.1
// encoder, must give the reference's prompt and the same special-token byte ranges.
#include <gtest/gtest.h>

#include <string>

#include "golden_json.h"
#include "recipe/dsv4_encoding.h"

namespace deepinfer::recipe {
namespace {

using namespace golden;  // NOLINT

TEST(RecipeGolden, PromptsMatchReferenceByteForByte) {
  Json golden = load_golden();
  ASSERT_GE(golden["cases"].size(), 300u);
  int rendered = 0, prompt_match = 0, ranges_match = 0;
  for (const Json& c : golden["cases"]) {
    if (!c.contains("conversation")) continue;  // a rejected request: no prompt to compare
    ++rendered;
    Conversation conv = conversation_from_json(c["conversation"]);
    PromptEncoding enc =
        c["encoding"] == "v41" ? PromptEncoding::kDeepseekV41 : PromptEncoding::kDeepseekV4;
    RenderedPrompt out = render_prompt(conv, enc);
    const std::string expected = c["prompt"].get<std::string>();
    const std::string got = out.text();
    if (got == expected) {
      ++prompt_match;
    } else {
      size_t at = 0;
      while (at < got.size() && at < expected.size() && got[at] == expected[at]) ++at;
      ADD_FAILURE() << "case " << c["id"] << " (" << c["encoding"].get<std::string>()
                    << ") differs at byte " << at << "\n  expected: " << excerpt(expected, at)
                    << "\n  got:      " << excerpt(got, at);
      continue;
    }
    std::vector<std::pair<size_t, size_t>> want;
    for (const Json& r : c["special"]) want.emplace_back(r[0].get<size_t>(), r[1].get<size_t>());
    if (out.special_ranges() == want) {
      ++ranges_match;
    } else {
      ADD_FAILURE() << "case " << c["id"] << ": special-token ranges differ";
    }
    EXPECT_EQ(out.image_sources.size(), c["num_images"].get<size_t>()) << "case " << c["id"];
  }
  std::printf("recipe golden: %d/%d prompts byte-exact, %d/%d special ranges exact\n", prompt_match,
              rendered, ranges_match, rendered);
}

}  // namespace
}  // namespace deepinfer::recipe
