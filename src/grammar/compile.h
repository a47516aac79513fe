// The grammar layer's entry point: a constraint as the user wrote it (regex, JSON Schema, GBNF,
// or a list of choices) compiled against a vocabulary, and a cache of compiled grammars.
//
//   auto tokens = TokenIndex::build(tokenizer);            // once per vocabulary
//   DI_ASSIGN_OR_RETURN(auto compiled, compile_grammar(spec, tokens, {}));
//   Matcher matcher(compiled);                             // one per request (matcher.h)
//
// Errors: INVALID_ARGUMENT for a malformed grammar or one using something this layer cannot
// express (the message names the keyword or construct), RESOURCE_EXHAUSTED past the compile
// budget. Nothing is ever loosened silently. Thread-safe: compile_grammar is a pure function,
// GrammarCache locks.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"
#include "grammar/automaton.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_index.h"

namespace deepinfer::grammar {

// kGbnf is EBNF in either dialect: GBNF, or Lark when the text looks like it (lark.h's
// looks_like_lark), which is how the servers' `grammar`/`ebnf` fields take both. kLark is Lark
// whatever the text looks like.
enum class GrammarKind { kRegex, kJsonSchema, kGbnf, kChoice, kLark };

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kRegex;
  std::string text;                  // the regex, the schema (JSON text) or the EBNF grammar
  std::vector<std::string> choices;  // kChoice: the output is exactly one of these
  JsonSchemaOptions json;
};

struct CompileOptions {
  CompileBudget budget;
  MatcherLimits limits;
};

// The front end alone: the spec lowered to the IR (tests, --dump).
Result<Grammar> lower_grammar(const GrammarSpec& spec);

Result<std::shared_ptr<const CompiledGrammar>> compile_grammar(const GrammarSpec& spec,
                                                               std::shared_ptr<const TokenIndex> tokens,
                                                               const CompileOptions& options);

// Compiled grammars by (spec, vocabulary), least recently used dropped past `capacity`. Errors
// are not cached (a budget error may pass another time on a less loaded machine).
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity) : capacity_(capacity) {}
  Result<std::shared_ptr<const CompiledGrammar>> get(const GrammarSpec& spec, std::shared_ptr<const TokenIndex> tokens,
                                                     const CompileOptions& options);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace deepinfer::grammar
