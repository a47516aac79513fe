// Tokenizers built from small vocabularies written here, so that merge order, byte fallback and
// special-token handling have exact hand-checked expectations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

using Ids = std::vector<int32_t>;

constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

MetaValue string_array(const std::vector<std::string>& items) {
  MetaArray a;
  a.element_type = MetaType::kString;
  for (const auto& s : items) a.items.push_back(MetaValue::of_string(s));
  return MetaValue::of_array(std::move(a));
}
MetaValue int_array(const std::vector<int>& items) {
  MetaArray a;
  a.element_type = MetaType::kI32;
  for (int v : items) a.items.push_back(MetaValue::of_int(v, MetaType::kI32));
  return MetaValue::of_array(std::move(a));
}
MetaValue float_array(const std::vector<float>& items) {
  MetaArray a;
  a.element_type = MetaType::kF32;
  for (float v : items) a.items.push_back(MetaValue::of_float(v, MetaType::kF32));
  return MetaValue::of_array(std::move(a));
}
MetaValue id(int v) { return MetaValue::of_uint(static_cast<uint64_t>(v), MetaType::kU32); }

std::unique_ptr<Tokenizer> build(const Metadata& md) {
  auto tok = Tokenizer::from_metadata(md);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

// ---- byte-level BPE ("gpt2") ----

// Byte-level spellings: 'Ġ' (U+0120) is the space byte.
const std::vector<std::string> kBpeTokens = {
    "<|endoftext|>", "<|im_end|>", "<tag>", "a", "b", "c", "\xC4\xA0", "ab", "bc", "abc", "\xC4\xA0" "a", "<unk>", "aa",
};
const std::vector<int> kBpeTypes = {kControl, kControl, kUserDefined, kNormal, kNormal, kNormal, kNormal,
                                    kNormal,  kNormal,  kNormal,      kNormal, kUnknown, kNormal};
enum BpeId { kEndOfText, kImEnd, kTag, kA, kB, kC, kSpace, kAB, kBC, kABC, kSpaceA, kUnk, kAA };

Metadata bpe_metadata(const std::vector<std::string>& merges) {
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::of_string("gpt2"));
  md.set("tokenizer.ggml.pre", MetaValue::of_string("gpt2"));
  md.set("tokenizer.ggml.tokens", string_array(kBpeTokens));
  md.set("tokenizer.ggml.token_type", int_array(kBpeTypes));
  md.set("tokenizer.ggml.merges", string_array(merges));
  md.set("tokenizer.ggml.eos_token_id", id(kEndOfText));
  md.set("tokenizer.ggml.unknown_token_id", id(kUnk));
  md.set("tokenizer.chat_template", MetaValue::of_string("{{ messages }}"));
  return md;
}

TEST(ByteLevelBpe, MergesByRank) {
  // "b c" outranks "a b", so "abc" becomes a + bc, then abc.
  auto tok = build(bpe_metadata({"b c", "a b", "a bc", "\xC4\xA0 a"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("abc", {}), (Ids{kABC}));
  EXPECT_EQ(tok->encode("ab", {}), (Ids{kAB}));
  EXPECT_EQ(tok->encode("cab", {}), (Ids{kC, kAB}));
  EXPECT_EQ(tok->encode(" a", {}), (Ids{kSpaceA}));
  // In " abc" the pair (a, bc) outranks (Ġ, a): the space stays alone.
  EXPECT_EQ(tok->encode("abc abc", {}), (Ids{kABC, kSpace, kABC}));

  // With the ranks the other way round "abc" ends as ab + c (no "ab c" merge).
  auto other = build(bpe_metadata({"a b", "b c"}));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->encode("abc", {}), (Ids{kAB, kC}));
}

TEST(ByteLevelBpe, EqualRanksMergeLeftmostFirst) {
  auto tok = build(bpe_metadata({"a a"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("aaa", {}), (Ids{kAA, kA}));
  EXPECT_EQ(tok->encode("aaaaa", {}), (Ids{kAA, kAA, kA}));
}

// A GGUF byte-level vocabulary that lacks a byte's symbol drops that byte, as llama.cpp and
// transformers' GGUF loader do (SmolLM2 lacks 0x04, 0x06, 0x13, ...): it never becomes <unk>.
TEST(ByteLevelBpe, BytesMissingFromTheVocabularyAreDropped) {
  auto tok = build(bpe_metadata({"a b"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("adb", {}), (Ids{kA, kB}));
  EXPECT_EQ(tok->decode(Ids{kA, kUnk, kB}), "ab");  // unknown renders as nothing
}

TEST(ByteLevelBpe, DecodeMapsBytesBack) {
  auto tok = build(bpe_metadata({"a b"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode(Ids{kABC, kSpace, kSpaceA}), "abc  a");
  EXPECT_EQ(tok->token_piece(kSpaceA), " a");
  EXPECT_EQ(tok->token_text(kSpaceA), "\xC4\xA0" "a");
  EXPECT_EQ(tok->decode(Ids{kEndOfText, kA, kImEnd}), "a");  // control tokens render as nothing
  EXPECT_EQ(tok->decode(Ids{kA, -1, 1000, kB}), "ab");       // ids out of range too
  EXPECT_EQ(tok->token_text(1000), "");
}

TEST(ByteLevelBpe, SpecialTokens) {
  auto tok = build(bpe_metadata({"a b"}));
  ASSERT_TRUE(tok);
  const EncodeOptions special{.add_bos = false, .parse_special = true};
  // User-defined entries are recognised in any text; control tokens only with parse_special.
  EXPECT_EQ(tok->encode("a<tag>b", {}), (Ids{kA, kTag, kB}));
  EXPECT_EQ(tok->encode("a<tag>b", special), (Ids{kA, kTag, kB}));
  EXPECT_EQ(tok->encode("a<|im_end|>b", special), (Ids{kA, kImEnd, kB}));
  const Ids plain = tok->encode("a<|im_end|>b", {});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kImEnd), 0);
  EXPECT_EQ(plain.front(), kA);
  EXPECT_EQ(plain.back(), kB);
  EXPECT_EQ(tok->encode("<|im_end|><|endoftext|>", special), (Ids{kImEnd, kEndOfText}));
}

TEST(ByteLevelBpe, Properties) {
  auto tok = build(bpe_metadata({"a b"}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->n_vocab(), static_cast<int64_t>(kBpeTokens.size()));
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->eos_id(), kEndOfText);
  EXPECT_FALSE(tok->add_bos_by_default());  // byte-level BPE's default
  EXPECT_TRUE(tok->is_end_of_generation(kEndOfText));
  EXPECT_TRUE(tok->is_end_of_generation(kImEnd));  // by name
  EXPECT_FALSE(tok->is_end_of_generation(kTag));
  EXPECT_FALSE(tok->is_end_of_generation(kA));
  EXPECT_TRUE(tok->is_control(kImEnd));
  EXPECT_FALSE(tok->is_control(kTag));
  EXPECT_EQ(tok->find_token("abc"), kABC);
  EXPECT_EQ(tok->find_token("abcd"), std::nullopt);
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
  // add_bos with no BOS in the vocabulary adds nothing.
  EXPECT_EQ(tok->encode("a", {.add_bos = true, .parse_special = false}), (Ids{kA}));
}

// ---- SentencePiece-style BPE ("llama") ----

constexpr int32_t kByte0 = 3;  // <0x00>; byte b is kByte0 + b
struct SpmIds {
  static constexpr int32_t kMark = 259;  // "▁"
  static constexpr int32_t kA = 260, kB = 261, kC = 262, kAB = 263, kBC = 264, kMarkA = 265, kAA = 266,
                           kNewlines = 267, kStart = 268;
};

// ab_first: "ab" scores above "bc" (otherwise below). There is no "abc" entry.
Metadata spm_metadata(bool ab_first, bool space_prefix) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int> types = {kUnknown, kControl, kControl};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(kByte);
  }
  auto add = [&](std::string text, float score, int type) {
    tokens.push_back(std::move(text));
    scores.push_back(score);
    types.push_back(type);
  };
  add("\xE2\x96\x81", -5, kNormal);
  add("a", -5, kNormal);
  add("b", -5, kNormal);
  add("c", -5, kNormal);
  add("ab", ab_first ? -1 : -2, kNormal);
  add("bc", ab_first ? -2 : -1, kNormal);
  add("\xE2\x96\x81" "a", -4, kNormal);
  add("aa", -1, kNormal);
  add("\n\n", 0, kUserDefined);
  add("<start>", 0, kControl);
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::of_string("llama"));
  md.set("tokenizer.ggml.tokens", string_array(tokens));
  md.set("tokenizer.ggml.scores", float_array(scores));
  md.set("tokenizer.ggml.token_type", int_array(types));
  md.set("tokenizer.ggml.bos_token_id", id(1));
  md.set("tokenizer.ggml.eos_token_id", id(2));
  md.set("tokenizer.ggml.unknown_token_id", id(0));
  md.set("tokenizer.ggml.add_space_prefix", MetaValue::of_bool(space_prefix));
  return md;
}

TEST(SentencePiece, MergesByScore) {
  using S = SpmIds;
  auto bc_first = build(spm_metadata(/*ab_first=*/false, /*space_prefix=*/false));
  auto ab_first = build(spm_metadata(/*ab_first=*/true, /*space_prefix=*/false));
  ASSERT_TRUE(bc_first && ab_first);
  EXPECT_EQ(bc_first->encode("abc", {}), (Ids{S::kA, S::kBC}));
  EXPECT_EQ(ab_first->encode("abc", {}), (Ids{S::kAB, S::kC}));
  EXPECT_EQ(bc_first->encode("aaa", {}), (Ids{S::kAA, S::kA}));  // equal scores: leftmost first
}

TEST(SentencePiece, SpacesBecomeMarks) {
  using S = SpmIds;
  auto tok = build(spm_metadata(false, /*space_prefix=*/false));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("a b", {}), (Ids{S::kA, S::kMark, S::kB}));  // no "a▁" or "▁b" entries
  EXPECT_EQ(tok->encode("b a", {}), (Ids{S::kB, S::kMarkA}));
  EXPECT_EQ(tok->decode(Ids{S::kB, S::kMarkA}), "b a");
  EXPECT_EQ(tok->token_piece(S::kMarkA), " a");
  EXPECT_EQ(tok->token_text(S::kMarkA), "\xE2\x96\x81" "a");

  auto prefixed = build(spm_metadata(false, /*space_prefix=*/true));
  ASSERT_TRUE(prefixed);
  EXPECT_EQ(prefixed->encode("a", {}), (Ids{S::kMarkA}));
  // The prefix also follows a special token, as SentencePiece encodes each text segment.
  EXPECT_EQ(prefixed->encode("<s>a", {.add_bos = false, .parse_special = true}), (Ids{1, S::kMarkA}));
}

TEST(SentencePiece, UnknownCharactersFallBackToBytes) {
  using S = SpmIds;
  auto tok = build(spm_metadata(false, false));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->encode("\xC3\xA9", {}), (Ids{kByte0 + 0xC3, kByte0 + 0xA9}));  // é
  EXPECT_EQ(tok->encode("a\xF0\x9F\x98\x80", {}),
            (Ids{S::kA, kByte0 + 0xF0, kByte0 + 0x9F, kByte0 + 0x98, kByte0 + 0x80}));  // 😀
  EXPECT_EQ(tok->decode(Ids{kByte0 + 0xC3, kByte0 + 0xA9}), "\xC3\xA9");
  EXPECT_EQ(tok->token_piece(kByte0 + 0xC3), "\xC3");
  // Invalid UTF-8 survives as bytes and decodes with U+FFFD.
  EXPECT_EQ(tok->encode("\xFF" "a", {}), (Ids{kByte0 + 0xFF, S::kA}));
  EXPECT_EQ(tok->decode(Ids{kByte0 + 0xFF, S::kA}), "\xEF\xBF\xBD" "a");
}

TEST(SentencePiece, SpecialTokensAndDefaults) {
  using S = SpmIds;
  auto tok = build(spm_metadata(false, false));
  ASSERT_TRUE(tok);
  const EncodeOptions special{.add_bos = false, .parse_special = true};
  EXPECT_EQ(tok->encode("a\n\nb", {}), (Ids{S::kA, S::kNewlines, S::kB}));  // user-defined: always
  EXPECT_EQ(tok->encode("<start>a", special), (Ids{S::kStart, S::kA}));
  EXPECT_EQ(tok->encode("<s>a", {}), (Ids{kByte0 + '<', kByte0 + 's', kByte0 + '>', S::kA}));
  EXPECT_EQ(tok->encode("a", {.add_bos = true, .parse_special = false}), (Ids{1, S::kA}));
  EXPECT_TRUE(tok->add_bos_by_default());  // SentencePiece's default
  EXPECT_EQ(tok->decode(Ids{1, S::kA, S::kStart, 2}), "a");
  EXPECT_TRUE(tok->is_end_of_generation(2));
  EXPECT_FALSE(tok->is_end_of_generation(1));
  EXPECT_EQ(tok->bos_id(), 1);
}

TEST(IncrementalDecoder, HoldsSplitCharacters) {
  auto tok = build(spm_metadata(false, false));
  ASSERT_TRUE(tok);
  IncrementalDecoder dec(*tok);
  EXPECT_EQ(dec.push(SpmIds::kA), "a");
  EXPECT_EQ(dec.push(kByte0 + 0xF0), "");
  EXPECT_EQ(dec.push(kByte0 + 0x9F), "");
  EXPECT_EQ(dec.push(kByte0 + 0x98), "");
  EXPECT_EQ(dec.push(kByte0 + 0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.finish(), "");

  IncrementalDecoder cut(*tok);
  EXPECT_EQ(cut.push(kByte0 + 0xE4), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");  // a sequence that never completed

  IncrementalDecoder broken(*tok);
  EXPECT_EQ(broken.push(kByte0 + 0xE4), "");
  EXPECT_EQ(broken.push(SpmIds::kA), "\xEF\xBF\xBD" "a");  // replaced as soon as it cannot complete
}

TEST(IncrementalDecoder, RandomStreamsEqualWholeDecode) {
  auto tok = build(spm_metadata(false, false));
  ASSERT_TRUE(tok);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(tok->n_vocab()) - 1);
  // Mostly bytes of multi-byte sequences, so that splits and invalid runs both occur.
  std::uniform_int_distribution<int32_t> high_byte(kByte0 + 0x80, kByte0 + 0xFF);
  for (int round = 0; round < 500; ++round) {
    Ids ids(static_cast<size_t>(rng() % 12));
    for (auto& x : ids) x = rng() % 3 == 0 ? any_id(rng) : high_byte(rng);
    IncrementalDecoder dec(*tok);
    std::string streamed;
    for (int32_t x : ids) streamed += dec.push(x);
    streamed += dec.finish();
    ASSERT_EQ(streamed, tok->decode(ids)) << "round " << round;
  }
}

TEST(Tokenizer, ConcurrentEncodeAgreesWithSerial) {
  auto tok = build(spm_metadata(false, false));
  ASSERT_TRUE(tok);
  const std::string text = "abc b a aaa \xC3\xA9\n\n<start>\xF0\x9F\x98\x80 ";
  const EncodeOptions special{.add_bos = true, .parse_special = true};
  const Ids want = tok->encode(text, special);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) mismatches[t] += tok->encode(text, special) != want;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// ---- metadata errors ----

std::string error_of(const Metadata& md) {
  auto tok = Tokenizer::from_metadata(md);
  EXPECT_FALSE(tok.ok());
  return tok.ok() ? std::string() : tok.status().to_string();
}

TEST(TokenizerMetadata, ErrorsNameTheKey) {
  Metadata no_model = bpe_metadata({"a b"});
  no_model.set("tokenizer.ggml.model", MetaValue::of_string("bert"));
  EXPECT_NE(error_of(no_model).find("tokenizer.ggml.model"), std::string::npos);
  EXPECT_NE(error_of(no_model).find("UNIMPLEMENTED"), std::string::npos);

  Metadata empty;
  EXPECT_NE(error_of(empty).find("tokenizer.ggml.model"), std::string::npos);

  Metadata no_merges = bpe_metadata({});
  Metadata copy;
  for (const auto& [k, v] : no_merges.all()) {
    if (k != "tokenizer.ggml.merges") copy.set(k, v);
  }
  EXPECT_NE(error_of(copy).find("tokenizer.ggml.merges"), std::string::npos);

  EXPECT_NE(error_of(bpe_metadata({"a b", "nospace"})).find("tokenizer.ggml.merges[1]"), std::string::npos);

  Metadata bad_types = bpe_metadata({"a b"});
  bad_types.set("tokenizer.ggml.token_type", int_array({1, 1}));
  EXPECT_NE(error_of(bad_types).find("tokenizer.ggml.token_type"), std::string::npos);

  Metadata bad_bos = bpe_metadata({"a b"});
  bad_bos.set("tokenizer.ggml.bos_token_id", id(5000));
  EXPECT_NE(error_of(bad_bos).find("tokenizer.ggml.bos_token_id"), std::string::npos);

  Metadata spm = spm_metadata(false, false);
  spm.set("tokenizer.ggml.scores", float_array({0.0f}));
  EXPECT_NE(error_of(spm).find("tokenizer.ggml.scores"), std::string::npos);

  Metadata wrong_type = bpe_metadata({"a b"});
  wrong_type.set("tokenizer.ggml.tokens", MetaValue::of_string("not an array"));
  EXPECT_NE(error_of(wrong_type).find("tokenizer.ggml.tokens"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
