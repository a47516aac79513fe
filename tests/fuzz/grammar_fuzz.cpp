// libFuzzer target of the grammar front ends and what they compile to (src/grammar/): the
// first byte picks the dialect (GBNF, Lark, a regex, a JSON Schema, or the server's EBNF
// detection), the rest is the grammar text a client would send, compiled under a small budget
// against a vocabulary of every byte and a few multi-byte pieces; what compiles is then walked.
// Checks:
//   - a refusal is INVALID_ARGUMENT or RESOURCE_EXHAUSTED with a message, never a crash, a
//     hang past the budget, or another code;
//   - every state's token class from the fast walk (virtual levels, subtrees accepted whole)
//     equals the plain walk's, for the first states of the automaton;
//   - a matcher fed the bytes of some allowed tokens (the lowest allowed id each step) keeps a
//     mask that allows the token it is fed, and rollback to the start gives back the first mask.
// Built and run by scripts/fuzz.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compile.h"
#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"

namespace {

using namespace deepinfer::grammar;

[[noreturn]] void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "grammar_fuzz: %s\n%.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

std::shared_ptr<const TokenIndex> vocabulary() {
  static const std::shared_ptr<const TokenIndex> index = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p : {"\"", "\":", "{\"", "\"}", "true", "null", "ab", "abc", "12", "123", ", ", ": ", "  ",
                          "\\n", "\\u00", "é", "日本", " the", "ing", "\"a\"", "[]", "{}", "0.5", "-1"}) {
      pieces.push_back(p);
    }
    pieces.push_back("");  // the stop token
    const auto stop = static_cast<int32_t>(pieces.size() - 1);
    return TokenIndex::from_pieces(std::move(pieces), {stop});
  }();
  return index;
}

bool allowed(const std::vector<uint64_t>& mask, int32_t id) { return (mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  GrammarSpec spec;
  const GrammarKind kinds[] = {GrammarKind::kGbnf, GrammarKind::kLark, GrammarKind::kRegex, GrammarKind::kJsonSchema,
                               GrammarKind::kGbnf};
  spec.kind = kinds[data[0] % 5];
  spec.text.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  CompileOptions options;
  options.budget.max_states = 20000;
  options.budget.max_seconds = 1.0;
  const auto vocab = vocabulary();
  auto compiled = compile_grammar(spec, vocab, options);
  if (!compiled.ok()) {
    const auto code = compiled.status().code();
    if (code != deepinfer::StatusCode::kInvalidArgument && code != deepinfer::StatusCode::kResourceExhausted) {
      fail("a refusal that is neither INVALID_ARGUMENT nor RESOURCE_EXHAUSTED", compiled.status().to_string());
    }
    if (compiled.status().message().empty()) fail("a refusal without a message", spec.text);
    return 0;
  }
  const CompiledGrammar& g = **compiled;
  const uint32_t n_check = std::min<uint32_t>(g.automaton().n_states(), 24);
  for (uint32_t s = 0; s < n_check; ++s) {
    const TokenClass fast = compute_token_class(g.automaton(), *vocab, s, g.limits().max_stack_depth, true);
    const TokenClass plain = compute_token_class(g.automaton(), *vocab, s, g.limits().max_stack_depth, false);
    if (fast.accepted_bits != plain.accepted_bits || fast.accepted_list != plain.accepted_list ||
        fast.uncertain != plain.uncertain) {
      fail("the fast class walk differs from the plain one", spec.text);
    }
  }
  Matcher m(*compiled);
  std::vector<uint64_t> first(static_cast<size_t>(vocab->n_words())), mask;
  m.fill_mask(first);
  mask = first;
  int fed = 0;
  for (int step = 0; step < 16; ++step) {
    int32_t id = -1;
    for (int32_t t = 0; t < vocab->n_vocab() && id < 0; ++t) {
      if (allowed(mask, t) && !vocab->is_stop(t)) id = t;
    }
    if (id < 0) break;
    if (!m.accept_token(id)) fail("a token the mask allowed was refused", spec.text);
    ++fed;
    m.fill_mask(mask);
  }
  m.rollback(fed);
  m.fill_mask(mask);
  if (mask != first) fail("rollback to the start does not give back the first mask", spec.text);
  return 0;
}
