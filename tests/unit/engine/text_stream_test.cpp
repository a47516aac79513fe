// TextStream on the default model's tokenizer: text released per token concatenates to
// decode(); stop strings are found across token boundaries, the earliest wins, and text that
// might start one is held back until it cannot.
#include "engine/text_stream.h"

#include <gtest/gtest.h>

#include "model/loader/tensor_source.h"
#include "test_models.h"

namespace deepinfer {
namespace {

class TextStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::real_model();
    ASSERT_FALSE(path.empty());
    auto source = open_tensor_source(path);
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    auto tok = Tokenizer::from_metadata((*source)->metadata());
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    tokenizer_ = std::move(tok).value();
  }

  std::vector<int32_t> ids(const std::string& text) const { return tokenizer_->encode(text, {}); }

  struct Run {
    std::string text;
    size_t n_tokens = 0;  // tokens consumed
    bool stopped = false;
    std::string stop_string;
  };
  // Feeds the ids one at a time, as the engine's events arrive.
  Run run(const std::vector<int32_t>& tokens, std::vector<std::string> stop, bool include = false) const {
    TextStream stream(*tokenizer_, std::move(stop), include);
    Run r;
    for (int32_t id : tokens) {
      TextPiece p = stream.push(std::span<const int32_t>(&id, 1));
      r.text += p.text;
      r.n_tokens += p.n_tokens;
      if (p.stopped) {
        r.stopped = true;
        r.stop_string = p.stop_string;
        return r;
      }
    }
    TextPiece p = stream.finish();
    r.text += p.text;
    r.stopped = p.stopped;
    r.stop_string = p.stop_string;
    return r;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TextStreamTest, ConcatenationEqualsDecodeWithoutStopStrings) {
  const std::vector<int32_t> tokens = ids("Héllo wörld — 你好, 🙂 and   spaces\n\ttabs <|im_end|> done.");
  const Run r = run(tokens, {"never appears"});
  EXPECT_EQ(r.text, tokenizer_->decode(tokens));
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.n_tokens, tokens.size());
}

TEST_F(TextStreamTest, StopStringSpanningTokensCutsTheText) {
  const std::vector<int32_t> tokens = ids("The quick brown fox jumps over the lazy dog.");
  const Run r = run(tokens, {"own fox ju"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_string, "own fox ju");
  EXPECT_EQ(r.text, "The quick br");
  // The stream stops at the token that completes the match, not later.
  EXPECT_EQ(tokenizer_->decode(std::span<const int32_t>(tokens.data(), r.n_tokens - 1)).find("own fox ju"),
            std::string::npos);
  EXPECT_NE(tokenizer_->decode(std::span<const int32_t>(tokens.data(), r.n_tokens)).find("own fox ju"),
            std::string::npos);
}

TEST_F(TextStreamTest, IncludeStopStringKeepsIt) {
  const Run r = run(ids("The quick brown fox jumps"), {"brown"}, /*include=*/true);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "The quick brown");
}

TEST_F(TextStreamTest, EarliestOfSeveralStopStringsWins) {
  const Run r = run(ids("one two three four five"), {"four", "two thr", "five"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_string, "two thr");
  EXPECT_EQ(r.text, "one ");
}

TEST_F(TextStreamTest, StopStringInTheFirstToken) {
  const std::vector<int32_t> tokens = ids("Hello there");
  const Run r = run(tokens, {"Hell"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.n_tokens, 1u);
}

TEST_F(TextStreamTest, PossibleStopStartIsHeldBackThenReleased) {
  TextStream stream(*tokenizer_, {"fox!"}, false);
  std::string released;
  for (int32_t id : ids("a fox")) released += stream.push(std::span<const int32_t>(&id, 1)).text;
  EXPECT_EQ(released, "a ") << "\"fox\" could still become \"fox!\"";
  for (int32_t id : ids(" ran")) released += stream.push(std::span<const int32_t>(&id, 1)).text;
  EXPECT_EQ(released, "a fox ran");
  EXPECT_FALSE(stream.stopped());
}

TEST_F(TextStreamTest, HeldBackTextIsReleasedAtTheEnd) {
  TextStream stream(*tokenizer_, {"end"}, false);
  std::string released;
  for (int32_t id : ids("the en")) released += stream.push(std::span<const int32_t>(&id, 1)).text;
  EXPECT_EQ(released, "the ");
  TextPiece last = stream.finish();
  EXPECT_FALSE(last.stopped);
  EXPECT_EQ(released + last.text, "the en");
}

}  // namespace
}  // namespace deepinfer
