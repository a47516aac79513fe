// Bad input for the protocol adapters: random mutations of the golden requests must give a
// conversation or a 400-shaped error in our words, never a crash, a hang, an escaping exception
// or the JSON library's message.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "golden_json.h"
#include "recipe/protocol.h"

namespace deepinfer::recipe {
namespace {

using namespace golden;  // NOLINT

std::string mutate(std::string s, std::mt19937& rng) {
  static const std::string kAlphabet = "{}[]\":,0123456789-.eE ntfrua\\\n\x01\xff<｜>";
  std::uniform_int_distribution<int> op(0, 3);
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t at = rng() % s.size();
    switch (op(rng)) {
      case 0:
        s.erase(at, 1 + rng() % 8);
        break;
      case 1:
        s.insert(at, 1, kAlphabet[rng() % kAlphabet.size()]);
        break;
      case 2:
        s[at] = kAlphabet[rng() % kAlphabet.size()];
        break;
      default:
        s.insert(at, s.substr(rng() % s.size(), rng() % 16));
        break;
    }
  }
  return s;
}

void expect_mutations_handled(const std::string& protocol,
                              Result<ConversationRequest> (*convert)(std::string_view,
                                                                     const ConversionOptions&)) {
  Json golden = load_golden();
  std::vector<std::string> seeds;
  for (const Json& c : golden["cases"]) {
    if (c.value("protocol", "") == protocol) {
      seeds.push_back(c["request"].is_string() ? c["request"].get<std::string>()
                                               : c["request"].dump());
    }
  }
  ASSERT_FALSE(seeds.empty());
  std::mt19937 rng(4);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string body = mutate(seeds[i % seeds.size()], rng);
    Result<ConversationRequest> r = convert(body, ConversionOptions{});
    if (r.ok()) {
      ++accepted;
      // An accepted request must render.
      (void)render_prompt(r->conversation, prompt_encoding(r->model_version));
    } else {
      ++rejected;
      ASSERT_EQ(error_status(r.status()), 400) << body;
      ASSERT_FALSE(r.status().message().empty());
      // Our words, never the JSON library's ("[json.exception.type_error.302] ...").
      ASSERT_EQ(r.status().message().find("json.exception"), std::string::npos) << body;
      ASSERT_TRUE(nlohmann::json::accept(error_body(r.status()))) << error_body(r.status());
    }
  }
  std::printf("mutated %s requests: %d accepted, %d rejected with a 400\n", protocol.c_str(),
              accepted, rejected);
}

// Every value of every golden request, in turn, replaced by one of each JSON type: each read
// checks the type first, so a rejection is a 400 in our words, never the library's exception
// text (which `value(key, default)` on a field of another type used to leak).
void expect_type_swaps_handled(const std::string& protocol,
                               Result<ConversationRequest> (*convert)(std::string_view,
                                                                      const ConversionOptions&)) {
  const Json others[] = {Json(5), Json(2.5), Json("x"), Json(true), Json(nullptr), Json::array(),
                         Json::object()};
  Json golden = load_golden();
  int tried = 0;
  for (const Json& c : golden["cases"]) {
    if (c.value("protocol", "") != protocol || c["request"].is_string()) continue;
    const Json request = c["request"];
    const Json flat = request.flatten();
    std::vector<std::string> pointers;
    for (const auto& [pointer, value] : flat.items()) {
      // The leaf and each of its parents.
      for (std::string p = pointer; !p.empty(); p = p.substr(0, p.rfind('/'))) pointers.push_back(p);
    }
    for (const std::string& pointer : pointers) {
      for (const Json& other : others) {
        Json mutated = request;
        mutated[Json::json_pointer(pointer)] = other;
        Result<ConversationRequest> r = convert(mutated.dump(), ConversionOptions{});
        ++tried;
        if (r.ok()) continue;
        ASSERT_EQ(error_status(r.status()), 400) << mutated.dump();
        ASSERT_EQ(r.status().message().find("json.exception"), std::string::npos)
            << r.status().message() << "\n  " << mutated.dump();
      }
    }
  }
  std::printf("%s: %d type-swapped requests handled\n", protocol.c_str(), tried);
}

TEST(ChatCompletions, TypeSwappedValuesGetOurWords) {
  expect_type_swaps_handled("chat", convert_chat_completions);
}

TEST(Responses, TypeSwappedValuesGetOurWords) {
  expect_type_swaps_handled("responses", convert_responses);
}

TEST(Messages, TypeSwappedValuesGetOurWords) {
  expect_type_swaps_handled("messages", convert_messages);
}

TEST(ChatCompletions, MutatedRequestsNeverCrash) {
  expect_mutations_handled("chat", convert_chat_completions);
}

TEST(Responses, MutatedRequestsNeverCrash) {
  expect_mutations_handled("responses", convert_responses);
}

TEST(Messages, MutatedRequestsNeverCrash) {
  expect_mutations_handled("messages", convert_messages);
}

}  // namespace
}  // namespace deepinfer::recipe
