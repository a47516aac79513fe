
#include <gtest/gtest.h>

#include "grammar/gbnf.h"
#include "grammar_test_util.h"
#include "model/catalog.h"
#include "tokenizer/tokenizer_loading.h"

// Heap allocations so far in this process (alloc_counter_test.cpp).
int64_t allocation_count();

namespace deepinfer::grammar {
namespace {

using testing::compile_spec;
using testing::toy_vocab;

std::vector<uint64_t> mask_of(Matcher& m) {
  std::vector<uint64_t> mask(m.grammar().tokens().n_words());
  m.fill_mask(mask);
  return mask;
}

TEST(Matcher, StopTokenIsAllowedExactlyWhereTheGrammarMayEnd) {
  auto vocab = toy_vocab();
  const int32_t stop = vocab->stop_ids()[0];
  auto g = compile_spec(GrammarKind::kRegex, "ab|abcd", vocab);
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  EXPECT_FALSE(mask_has(mask_of(m), stop));
  EXPECT_FALSE(m.accept_token(stop));
  ASSERT_TRUE(m.accept_token('a'));
  ASSERT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(mask_has(mask_of(m), stop));
  EXPECT_TRUE(mask_has(mask_of(m), 'c'));
  EXPECT_FALSE(m.is_complete());
  ASSERT_TRUE(m.accept_token('c'));
  EXPECT_FALSE(mask_has(mask_of(m), stop));
  ASSERT_TRUE(m.accept_token('d'));
  EXPECT_TRUE(m.is_complete());
  const std::vector<uint64_t> only_stop = mask_of(m);
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) EXPECT_EQ(mask_has(only_stop, id), id == stop) << id;
  EXPECT_TRUE(m.accept_token(stop));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('a'));
  const std::vector<uint64_t> after = mask_of(m);
  for (uint64_t w : after) EXPECT_EQ(w, 0u);
}

TEST(Matcher, RefusedTokensLeaveTheStateUnchanged) {
  auto g = compile_spec(GrammarKind::kRegex, "abc");
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  EXPECT_FALSE(m.accept_bytes("abd"));
  EXPECT_EQ(m.n_steps(), 0);
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.is_complete());
}

TEST(Matcher, RollbackRestoresMasksAndForkIsIndependent) {
  auto g = compile_spec(GrammarKind::kJsonSchema,
                        R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"enum":["x","y"]}},"required":["a","b"],"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Matcher m(*g);
  const std::vector<uint64_t> start = mask_of(m);
  ASSERT_TRUE(m.accept_bytes("{\"a\":"));
  const std::vector<uint64_t> at_value = mask_of(m);
  Matcher fork = m;
  ASSERT_TRUE(m.accept_bytes("12"));
  ASSERT_TRUE(m.accept_bytes(",\"b\":"));
  ASSERT_TRUE(m.accept_bytes("\"x\"}"));
  EXPECT_TRUE(m.can_end());
  // The fork stayed where it was.
  EXPECT_EQ(mask_of(fork), at_value);
  EXPECT_FALSE(fork.accept_bytes("\"x\""));
  EXPECT_TRUE(fork.accept_bytes("7,\"b\":\"y\"}"));
  EXPECT_TRUE(fork.can_end());
  m.rollback(3);
  EXPECT_EQ(m.n_steps(), 1);
  EXPECT_EQ(mask_of(m), at_value);
  m.rollback(5);  // more than there are: back to the start
  EXPECT_EQ(m.n_steps(), 0);
  EXPECT_EQ(mask_of(m), start);
}

TEST(Matcher, RollbackOverAStopToken) {
  auto vocab = toy_vocab();
  auto g = compile_spec(GrammarKind::kRegex, "a+", vocab);
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  ASSERT_TRUE(m.accept_token('a'));
  ASSERT_TRUE(m.accept_token(vocab->stop_ids()[0]));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.accept_token('a'));
}

TEST(Matcher, GbnfGrammarsAndLeftRecursion) {
  const char* gbnf = R"(
    root ::= item ("," item)*   # a list
    item ::= [a-z]+ | num
    num  ::= "-"? [0-9]{1,3}
  )";
  auto g = compile_spec(GrammarKind::kGbnf, gbnf);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(testing::matches(*g, "ab,-12,c"));
  EXPECT_FALSE(testing::matches(*g, "ab,1234"));
  EXPECT_FALSE(testing::matches(*g, "ab,"));
  auto left = compile_spec(GrammarKind::kGbnf, "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n");
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.status().message().find("left recursion"), std::string::npos) << left.status().message();
  EXPECT_NE(left.status().message().find("expr"), std::string::npos);
  auto undefined = compile_spec(GrammarKind::kGbnf, "root ::= missing\n");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.status().message().find("'missing'"), std::string::npos);
  auto no_root = compile_spec(GrammarKind::kGbnf, "a ::= \"x\"\n");
  EXPECT_FALSE(no_root.ok());
}

TEST(Matcher, GbnfEmbedsJsonSchemasWithPercentJson) {
  // Two schemas, each with rules of the same names (value, string, ...), beside a GBNF rule
  // that a schema's rule name could have shadowed.
  const std::string gbnf = R"(
    root  ::= "<a>" %json {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}},
                           "required": ["n"], "additionalProperties": false} "</a>" tail
    tail  ::= "<b>" %json {"enum": ["x]}", 2]} "</b>" | "."
    value ::= "never"
  )";
  auto g = compile_spec(GrammarKind::kGbnf, gbnf);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(testing::matches(*g, R"(<a>{"n":7}</a>.)"));
  EXPECT_TRUE(testing::matches(*g, R"(<a>{ "n": 0 }</a><b>"x]}"</b>)"));
  EXPECT_TRUE(testing::matches(*g, R"(<a>{"n":3}</a><b>2</b>)"));
  EXPECT_FALSE(testing::matches(*g, R"(<a>{"n":10}</a>.)"));
  EXPECT_FALSE(testing::matches(*g, R"(<a>{"n":1,"m":2}</a>.)"));
  EXPECT_FALSE(testing::matches(*g, R"(<a>{"n":1}</a><b>3</b>)"));
  EXPECT_FALSE(testing::matches(*g, R"(<a>never</a>.)"));
  // %pattern: JSON Schema's search semantics over raw text.
  auto p = compile_spec(GrammarKind::kGbnf, R"(root ::= "<" %pattern "^[A-Z]{2}\\d$" ">" %pattern "b+" "|")");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(testing::matches(*p, "<AB3>xbby|"));
  EXPECT_FALSE(testing::matches(*p, "<AB3x>b|"));
  EXPECT_FALSE(testing::matches(*p, "<AB3>xy|"));
  for (const char* bad : {"root ::= %json [1]\n", "root ::= %pattern \"(a\"\n", "root ::= %pattern x\n", "root ::= %json {\"type\": \"object\"\n",
                          "root ::= %json {\"type\": \"nonsense\"}\n", "root ::= %yaml {}\n"}) {
    auto refused = compile_spec(GrammarKind::kGbnf, bad);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Matcher, ForcedBytesAreWhatEveryContinuationStartsWith) {
  auto g = compile_spec(GrammarKind::kRegex, "ab(c|d)e");
  ASSERT_TRUE(g.ok());
  Matcher m(*g);
  EXPECT_EQ(m.forced_bytes(64), "ab");
  EXPECT_EQ(m.forced_bytes(1), "a");
  EXPECT_EQ(m.n_steps(), 0) << "the state is unchanged";
  ASSERT_TRUE(m.accept_bytes("abd"));
  EXPECT_EQ(m.forced_bytes(64), "e");
  ASSERT_TRUE(m.accept_bytes("e"));
  EXPECT_EQ(m.forced_bytes(64), "") << "complete: nothing is forced";
  // A compact JSON object whose keys and one value are fixed.
  auto j = compile_spec(GrammarKind::kJsonSchema, R"({"type": "object", "properties": {
      "kind": {"const": "point"}, "x": {"type": "integer"}}, "required": ["kind", "x"],
      "additionalProperties": false})");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  Matcher jm(*j);
  EXPECT_EQ(jm.forced_bytes(64), R"({"kind":"point","x":)");
  ASSERT_TRUE(jm.accept_bytes(R"({"kind":"point","x":12)"));
  EXPECT_EQ(jm.forced_bytes(64), "") << "more digits or the closing brace";
  // Optional text at the start: the grammar may end, nothing is forced.
  auto opt = compile_spec(GrammarKind::kRegex, "(ab)?");
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(Matcher(*opt).forced_bytes(64), "");
}

TEST(Matcher, ChoiceLists) {
  GrammarSpec spec;
  spec.kind = GrammarKind::kChoice;
  spec.choices = {"yes", "no", "maybe"};
  auto g = compile_grammar(spec, toy_vocab(), {});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(testing::matches(*g, "maybe"));
  EXPECT_FALSE(testing::matches(*g, "yesno"));
}

// A token's bytes are what decoding shows: DeepSeek's added markers that are not special
// (｜DSML｜, </think>) are single tokens a grammar can produce, as the model writes them; the
// end-of-sentence stop is not text.
TEST(TokenIndex, NonSpecialMarkersAreTextAndStopsAreNot) {
  const std::string dir = model_cache_dir() + "/deepseek-v4-tokenizer";
  auto tokenizer = load_tokenizer(dir, TokenizerPresence::kRequired);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string() << " (scripts/fetch-deepseek-tokenizer)";
  const auto index = TokenIndex::build(**tokenizer);
  for (const char* marker : {"｜DSML｜", "</think>"}) {
    const std::optional<int32_t> id = (*tokenizer)->find_token(marker);
    ASSERT_TRUE(id.has_value()) << marker;
    EXPECT_EQ(index->bytes(*id), marker);
  }
  const int32_t eos = (*tokenizer)->eos_id();
  ASSERT_GE(eos, 0);
  EXPECT_TRUE(index->is_stop(eos));
  EXPECT_TRUE(index->bytes(eos).empty());
}

// The tokens holding a trigger text, scanned once per text and shared by every later caller.
TEST(TokenIndex, TokensContainingATextAreFoundOnceAndShared) {
  const auto index = TokenIndex::from_pieces({"a", "</think>", "x</think>\n", "</th", "ink>", "", "</think></think>"}, {5});
  const auto holders = index->tokens_containing("</think>");
  EXPECT_EQ(*holders, (std::vector<int32_t>{1, 2, 6}));
  EXPECT_EQ(index->tokens_containing("</think>"), holders) << "the second caller gets the same list";
  EXPECT_EQ(*index->tokens_containing("ink"), (std::vector<int32_t>{1, 2, 4, 6}));
  EXPECT_TRUE(index->tokens_containing("<｜DSML｜")->empty());
}

// Whether `bytes` is text from a character boundary: UTF-8 without overlongs, surrogates or
// code points past U+10FFFF, no control character, DEL, '"' or '\\'; its last character may be
// cut short (if some continuation would complete it).
bool is_text(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b0 = static_cast<uint8_t>(bytes[i]);
    if (b0 < 0x80) {
      if (!TokenIndex::plain_byte(b0)) return false;
      ++i;
      continue;
    }
    const int n = (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0) return false;
    const size_t have = std::min<size_t>(n, bytes.size() - i);
    bool some = false;  // some completion of the (possibly cut) character is a valid one
    for (uint32_t fill = 0; fill < (1u << (6 * (n - have))) && !some; ++fill) {
      uint32_t cp = n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
      bool ok = true;
      for (int k = 1; k < n; ++k) {
        uint32_t cont;
        if (static_cast<size_t>(k) < have) {
          const auto c = static_cast<uint8_t>(bytes[i + k]);
          ok = ok && (c & 0xC0) == 0x80;
          cont = c & 0x3F;
        } else {
          cont = (fill >> (6 * (k - have))) & 0x3F;
        }
        cp = cp << 6 | cont;
      }
      const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
      some = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!some) return false;
    i += have;
  }
  return true;
}

// What the class walk's subtree shortcut reads off a trie node: the tokens below it, and how far
// below it everything is text when it ends a whole character. Checked against each node's prefix.
TEST(TokenIndex, SubtreeTokensAndTextBelowEachNode) {
  const std::vector<std::string> pieces = {"ab", "abc", "a\"b", "abd", "", "b", "bé", "b c", "a\\", "ab", "a", "é", "c\n",
                                           "xyz w", "xy", "x" + std::string(300, 'q'), "\xC3", "\xC3\xA9t", "\xE6\x97\xA5\xE6",
                                           "\xE6\x97", "\xED\xA0\x80", "\xC0\xAF", "d\x7F", "\xF0\x9F\x98\x80!", "\xF4\x90"};
  const auto index = TokenIndex::from_pieces(pieces, {4});
  const auto& trie = index->trie();
  std::vector<std::string> prefix;  // by depth
  for (uint32_t i = 0; i < trie.size(); ++i) {
    prefix.resize(trie[i].depth);
    prefix[trie[i].depth - 1] = (trie[i].depth > 1 ? prefix[trie[i].depth - 2] : std::string()) + static_cast<char>(trie[i].byte);
    const std::string& p = prefix.back();
    std::vector<int32_t> expected, got;
    bool text = true;
    size_t height = 0;
    for (size_t id = 0; id < pieces.size(); ++id) {
      if (pieces[id].empty() || pieces[id].rfind(p, 0) != 0) continue;
      expected.push_back(static_cast<int32_t>(id));
      text = text && is_text(std::string_view(pieces[id]).substr(p.size()));
      height = std::max(height, pieces[id].size() - p.size());
    }
    // p ends a whole character: its last byte is ASCII, or its last 2-4 bytes are one character.
    bool whole = static_cast<uint8_t>(p.back()) < 0x80;
    for (size_t k = 2; k <= 4 && k <= p.size() && !whole; ++k) {
      const std::string_view tail = std::string_view(p).substr(p.size() - k);
      const auto b0 = static_cast<uint8_t>(tail[0]);
      const size_t n = (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
      whole = n == k && is_text(tail);
    }
    for (uint32_t t = trie[i].first_token; t < index->subtree_tokens_end(i); ++t) got.push_back(index->node_tokens()[t]);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected) << "below '" << p << "'";
    EXPECT_EQ(trie[i].text_height, whole && text ? std::min<size_t>(height, 255) : 0) << "below '" << p << "'";
  }
  EXPECT_TRUE(TokenIndex::plain_byte(' '));
  EXPECT_TRUE(TokenIndex::plain_byte('~'));
  for (uint8_t b : {0x1f, 0x7f, 0x80, 0xc3, static_cast<int>('"'), static_cast<int>('\\')}) EXPECT_FALSE(TokenIndex::plain_byte(b)) << int(b);
}

std::shared_ptr<const TokenIndex> smollm2_vocab() {
  const KnownModel* model = find_known_model(kDefaultModelName);
  const std::string path = model ? cached_model_path(*model) : std::string();
  auto tokenizer = load_tokenizer(path, TokenizerPresence::kRequired);
  if (!tokenizer.ok()) {
    ADD_FAILURE() << "the default model's tokenizer: " << tokenizer.status().to_string() << "; run `deepinfer pull "
                  << kDefaultModelName << "` first";
    return nullptr;
  }
  static std::shared_ptr<const Tokenizer> keep;
  keep = *tokenizer;
  return TokenIndex::build(**tokenizer);
}

// Along real tokenizations of valid instances, the class-based mask equals the full trie walk,
// allows the next token, and (second pass, caches warm) allocates nothing.
TEST(Matcher, ClassMasksEqualTheFullWalkOnARealVocabulary) {
  auto vocab = smollm2_vocab();
  ASSERT_NE(vocab, nullptr);
  const KnownModel* model = find_known_model(kDefaultModelName);
  auto tokenizer = load_tokenizer(cached_model_path(*model), TokenizerPresence::kRequired);
  ASSERT_TRUE(tokenizer.ok());
  const char* schema = R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":130},
      "tags":{"type":"array","items":{"enum":["a","bc","déf"]},"maxItems":3},
      "when":{"type":"string","format":"date"},"score":{"type":"number"},
      "extra":{"type":"object","additionalProperties":{"type":"boolean"}}},
      "required":["name"],"additionalProperties":false})";
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.text = schema;
  spec.json.compact = false;
  spec.json.max_whitespace = 2;
  auto g = compile_grammar(spec, vocab, {});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const char* instances[] = {
      R"({"name":"Zoë \"Z\"","age":42,"tags":["a","déf"],"when":"2024-02-29","score":-1.5e3,"extra":{"x":true,"yy":false}})",
      R"({ "name": "a\\b\u0001", "age": 130, "tags": [] })",
      R"({"name":"","score":0,"extra":{}})",
  };
  std::vector<uint64_t> mask(vocab->n_words()), walk(vocab->n_words());
  for (const char* text : instances) {
    const std::vector<int32_t> ids = (*tokenizer)->encode(text, {});
    Matcher m(*g);
    for (int pass = 0; pass < 2; ++pass) {
      const int64_t allocations_before = allocation_count();
      for (size_t i = 0; i <= ids.size(); ++i) {
        m.fill_mask(mask);
        if (pass == 0) {
          m.fill_mask_by_walk(walk);
          ASSERT_EQ(mask, walk) << text << " before token " << i;
        }
        const int32_t next = i < ids.size() ? ids[i] : vocab->stop_ids()[0];
        ASSERT_TRUE(mask_has(mask, next)) << text << ": token " << i << " '" << vocab->bytes(next) << "' masked out";
        ASSERT_TRUE(m.accept_token(next)) << text << ": token " << i;
      }
      if (pass == 0) {
        EXPECT_GT(allocation_count() - allocations_before, 0) << "the allocation counter is not live";
      } else {
        EXPECT_EQ(allocation_count() - allocations_before, 0) << "mask and accept allocated";
      }
      m.rollback(m.n_steps());
    }
  }
}


// The class walk's shortcuts (virtual levels: a single call-free stack stepped without
// interning; subtrees of plain text accepted whole, in free and bounded strings) give the same
// classes as the plain walk, for every state of grammars with nested calls, strings (free,
// bounded, chunked past 1024 characters), numbers, enums and a recursive rule, on a real
// vocabulary.
TEST(TokenClass, VirtualLevelsGiveThePlainWalksClasses) {
  auto vocab = smollm2_vocab();
  ASSERT_NE(vocab, nullptr);
  const std::pair<GrammarKind, const char*> grammars[] = {
      {GrammarKind::kJsonSchema, R"({"type":"object","properties":{
          "name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":130},
          "about":{"type":"string","minLength":3,"maxLength":1500},"free":{"type":"string"},
          "tags":{"type":"array","items":{"enum":["a","bc","déf"]},"maxItems":3},
          "when":{"type":"string","format":"date"},"score":{"type":"number"},
          "nested":{"type":"array","items":{"type":"object","properties":{"k":{"type":"string"}}}}},
          "required":["name"]})"},
      {GrammarKind::kGbnf, R"G(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= num | "(" expr ")" | "\"" [a-z ]* "\""
num ::= [0-9]+ ("." [0-9]+)?)G"},
      // Text that leaves out some characters of each UTF-8 length: no subtree of text may be
      // taken whole by a state that refuses part of it.
      {GrammarKind::kGbnf, R"G(root ::= "\"" [^"\\\x00-\x1f\u00e0-\u00ef\u4e00-\u9fff\U0001F600-\U0001F64F]{0,40} "\"")G"},
  };
  // Pieces that run on past the end of a number, a word or a string into what the caller
  // expects next: a final state that still has byte edges, reached from a single stack, must
  // still be left by a pop (":1.5," from before a value, "(1.5+" from before a group).
  const auto crossing = testing::toy_vocab({"12,", "3)", "7+8", "1.5-", "9]", "42}", "ab+", "xyz\"", "a\",\"",
                                            "0,\"", "5\n", "12.", "e+1", "1e", "\"a\":1",
                                            ":1.5,", ":1.5}", ":0.25 ,", "(1.5+", "(1.5)", "(2.0-3", "é", "ñ",
                                            "\"ñé", "日本", "本", "ab日", "\xF0\x9F\x98\x80", "\xF0\x9F\x99\x90x", "x\xE6"});
  int64_t compared = 0;
  for (const std::shared_ptr<const TokenIndex>& index : {vocab, crossing}) {
    for (const auto& [kind, text] : grammars) {
      GrammarSpec spec;
      spec.kind = kind;
      spec.text = text;
      auto g = compile_grammar(spec, index, {});
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      const Automaton& a = (*g)->automaton();
      for (uint32_t state = 0; state < a.n_states(); ++state) {
        const TokenClass fast = compute_token_class(a, *index, state, 2000, true);
        const TokenClass plain = compute_token_class(a, *index, state, 2000, false);
        ASSERT_EQ(fast.accepted_bits, plain.accepted_bits) << text << " state " << state;
        ASSERT_EQ(fast.accepted_list, plain.accepted_list) << text << " state " << state;
        ASSERT_EQ(fast.uncertain, plain.uncertain) << text << " state " << state;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 100);
}

// The class walk steps through dense rows of byte classes: bytes of one class must lead every
// state to the same place, and the classes must be as few as the range boundaries allow.
TEST(Automaton, ByteClassesNeverSplitARangesBytes) {
  const std::pair<GrammarKind, const char*> grammars[] = {
      {GrammarKind::kJsonSchema, R"({"type":"object","properties":{"s":{"type":"string","maxLength":2000},
          "d":{"type":"string","format":"date-time"},"n":{"type":"number"},"e":{"enum":["x","ÿ","€"]}}})"},
      {GrammarKind::kGbnf, R"G(root ::= [a-fA-F0-9]+ ("\x00" | [\x80-\xff] | "z"))G"},
  };
  for (const auto& [kind, text] : grammars) {
    GrammarSpec spec;
    spec.kind = kind;
    spec.text = text;
    auto g = compile_grammar(spec, testing::toy_vocab({"a", "b"}), {});
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const Automaton& a = (*g)->automaton();
    ASSERT_GT(a.n_byte_classes(), 2u);
    std::vector<int> first_of_class(a.n_byte_classes(), -1);
    for (int b = 0; b < 256; ++b) {
      const uint8_t c = a.byte_class(static_cast<uint8_t>(b));
      ASSERT_LT(c, a.n_byte_classes());
      if (b > 0) {
        ASSERT_LE(a.byte_class(static_cast<uint8_t>(b - 1)), c) << "classes are runs of bytes";
      }
      if (first_of_class[c] < 0) first_of_class[c] = b;
    }
    bool some_boundary_needed[256] = {};  // class c starts at a byte where two states differ
    for (uint32_t s = 0; s < a.n_states(); ++s) {
      const Automaton::State& st = a.state(s);
      for (int b = 0; b < 256; ++b) {
        const int first = first_of_class[a.byte_class(static_cast<uint8_t>(b))];
        ASSERT_EQ(a.next(st, static_cast<uint8_t>(b)), a.next(st, static_cast<uint8_t>(first)))
            << text << " state " << s << " byte " << b;
        if (b > 0 && b == first && a.next(st, static_cast<uint8_t>(b)) != a.next(st, static_cast<uint8_t>(b - 1))) {
          some_boundary_needed[b] = true;
        }
      }
    }
    // Every class boundary separates bytes that some state tells apart.
    for (uint32_t c = 1; c < a.n_byte_classes(); ++c) {
      EXPECT_TRUE(some_boundary_needed[first_of_class[c]]) << text << " class " << c;
    }
  }
}

}  // namespace
}  // namespace deepinfer::grammar
