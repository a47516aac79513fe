#include "grammar/compile.h"

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/lark.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

Result<Grammar> lower_grammar(const GrammarSpec& spec) {
  switch (spec.kind) {
    case GrammarKind::kGbnf: return looks_like_lark(spec.text) ? parse_lark(spec.text) : parse_gbnf(spec.text);
    case GrammarKind::kLark: return parse_lark(spec.text);
    case GrammarKind::kJsonSchema: return json_schema_to_grammar(spec.text, spec.json);
    case GrammarKind::kRegex: {
      Grammar g;
      DI_ASSIGN_OR_RETURN(ExprId body, compile_regex(g, spec.text, RegexEncoding::kRaw, RegexMatch::kFull));
      g.set_root(g.add_rule("root", body));
      return g;
    }
    case GrammarKind::kChoice: {
      if (spec.choices.empty()) return invalid_argument("choice: the list of choices is empty");
      Grammar g;
      std::vector<ExprId> alts;
      for (const std::string& c : spec.choices) alts.push_back(g.bytes(c));
      g.set_root(g.add_rule("root", g.alt(std::move(alts))));
      return g;
    }
  }
  return invalid_argument("unknown grammar kind");
}

Result<std::shared_ptr<const CompiledGrammar>> compile_grammar(const GrammarSpec& spec,
                                                               std::shared_ptr<const TokenIndex> tokens,
                                                               const CompileOptions& options) {
  DI_ASSIGN_OR_RETURN(Grammar g, lower_grammar(spec));
  DI_ASSIGN_OR_RETURN(std::shared_ptr<const Automaton> automaton, Automaton::compile(g, options.budget));
  return std::shared_ptr<const CompiledGrammar>(
      std::make_shared<CompiledGrammar>(std::move(automaton), std::move(tokens), options.limits));
}

namespace {

std::string cache_key(const GrammarSpec& spec, const TokenIndex& tokens, const CompileOptions& o) {
  std::string key = std::to_string(static_cast<int>(spec.kind)) + ":" + std::to_string(tokens.id()) + ":" +
                    std::to_string(spec.json.compact) + ":" + std::to_string(spec.json.max_whitespace) + ":" +
                    std::to_string(o.budget.max_states) + ":" + std::to_string(o.limits.max_stack_depth) + ":";
  key += std::to_string(spec.text.size()) + ":" + spec.text;
  for (const std::string& c : spec.choices) {
    key += '\x1f';  // appended piece by piece: "lit" + string trips GCC 12's -Wrestrict
    key += std::to_string(c.size());
    key += ':';
    key += c;
  }
  return key;
}

}  // namespace

Result<std::shared_ptr<const CompiledGrammar>> GrammarCache::get(const GrammarSpec& spec,
                                                                 std::shared_ptr<const TokenIndex> tokens,
                                                                 const CompileOptions& options) {
  const std::string key = cache_key(spec, *tokens, options);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock: one slow grammar does not hold up lookups of others.
  DI_ASSIGN_OR_RETURN(auto compiled, compile_grammar(spec, std::move(tokens), options));
  std::lock_guard<std::mutex> lock(mutex_);
  if (index_.count(key)) return index_[key]->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

}  // namespace deepinfer::grammar
