// The tokenizer's text-level parts: UTF-8 replacement, the byte-level character table and the
// regex pre-tokenizer, each with hand-checked expectations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, SanitizeKeepsValidText) {
  const std::string text = "plain \xC3\xA9 \xE4\xBD\xA0 \xF0\x9F\x98\x80";  // é 你 😀
  EXPECT_EQ(utf8::sanitize(text), text);
  EXPECT_EQ(utf8::valid_length(text, 6), 2u);
  EXPECT_EQ(utf8::valid_length(text, 9), 3u);
  EXPECT_EQ(utf8::valid_length(text, 13), 4u);
}

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  // Expectations as Python's bytes.decode("utf-8", "replace") gives them.
  EXPECT_EQ(utf8::sanitize("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(utf8::sanitize("\xE2\x82"), kFffd);                         // cut-off sequence: one
  EXPECT_EQ(utf8::sanitize("\xE2\x82" "A"), kFffd + "A");               // broken sequence: one
  EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), kFffd + kFffd + kFffd);     // surrogate: three
  EXPECT_EQ(utf8::sanitize("\xC0\xAF"), kFffd + kFffd);                 // overlong: two
  EXPECT_EQ(utf8::sanitize("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // above U+10FFFF
  EXPECT_EQ(utf8::sanitize("\xF0\x9F\x98"), kFffd);
}

TEST(Utf8, HoldIncompleteKeepsOnlyATailThatCanStillComplete) {
  std::string out;
  EXPECT_EQ(utf8::append_sanitized("ab\xF0\x9F\x98", /*hold_incomplete=*/true, &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  // A broken sequence in the middle is replaced, not held.
  EXPECT_EQ(utf8::append_sanitized("\xF0\x9F" "x\xE4", /*hold_incomplete=*/true, &out), 3u);
  EXPECT_EQ(out, kFffd + "x");
  EXPECT_EQ(utf8::incomplete_length("\xE4\xBD", 0), 2u);
  EXPECT_EQ(utf8::incomplete_length("\xE4\xBD\xA0", 0), 0u);
}

TEST(ByteLevel, TableMatchesGpt2) {
  EXPECT_EQ(byte_level::char_of_byte(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_level::char_of_byte('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_level::char_of_byte('A'), "A");
  EXPECT_EQ(byte_level::code_point_of_byte(0x00), 0x100u);
  EXPECT_EQ(byte_level::code_point_of_byte(0x7F), 0x121u);  // after the 33 bytes 0x00..0x20
  EXPECT_EQ(byte_level::code_point_of_byte(0xAD), 0x143u);  // the last byte that is remapped
  EXPECT_EQ(byte_level::code_point_of_byte(0xE9), 0xE9u);   // printable Latin-1 stands for itself
  std::string all;
  for (int b = 0; b < 256; ++b) all += byte_level::char_of_byte(static_cast<uint8_t>(b));
  const std::string bytes = byte_level::decode(all);
  ASSERT_EQ(bytes.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(static_cast<uint8_t>(bytes[b]), b);
}

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  auto patterns = pre_tokenizer_patterns(pre);
  EXPECT_TRUE(patterns.ok()) << pre;
  auto splitter = RegexSplitter::create(*patterns);
  EXPECT_TRUE(splitter.ok()) << splitter.status().to_string();
  std::vector<std::string_view> pieces;
  splitter->split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(RegexSplit, Gpt2) {
  // Checked against Python's `regex` module with the same pattern.
  EXPECT_EQ(split("gpt2", "Hello world 12345 it's\n\n  x IT'S  "),
            (Pieces{"Hello", " world", " 12345", " it", "'s", "\n\n ", " x", " IT", "'", "S", "  "}));
}

TEST(RegexSplit, SmolLmSplitsDigitsFirst) {
  EXPECT_EQ(split("smollm", "a 123 3.14"), (Pieces{"a", " ", "1", "2", "3", " ", "3", ".", "1", "4"}));
}

TEST(RegexSplit, Llama3) {
  EXPECT_EQ(split("llama-bpe", "Hello world 12345 it's\n\n  x IT'S"),
            (Pieces{"Hello", " world", " ", "123", "45", " it", "'s", "\n\n", " ", " x", " IT", "'S"}));
}

TEST(RegexSplit, KeepsEveryByteIncludingInvalidUtf8) {
  const std::string text = "ab\xFF\xFE cd \xC3";
  const Pieces pieces = split("gpt2", text);
  std::string joined;
  for (const auto& p : pieces) joined += p;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(pieces.front(), "ab");
}

TEST(RegexSplit, UnknownPreIsNotFound) {
  auto patterns = pre_tokenizer_patterns("no-such-pre");
  ASSERT_FALSE(patterns.ok());
  EXPECT_EQ(patterns.status().code(), StatusCode::kNotFound);
  EXPECT_NE(patterns.status().message().find("no-such-pre"), std::string::npos);
}

TEST(RegexSplit, BadPatternNamesItself) {
  auto splitter = RegexSplitter::create({"(unclosed"});
  ASSERT_FALSE(splitter.ok());
  EXPECT_NE(splitter.status().message().find("(unclosed"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
