// Rendering a parsed template: jinja2's scoping (for bodies and macros open a scope, if does
// not; namespace objects carry state out of loops), loop variables, macros and call blocks,
// and bounds on recursion and loop work so that a hostile template cannot hang a server.
//
// One Evaluator per render; the AST it reads is shared and never modified.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "recipe/jinja/ast.h"
#include "recipe/jinja/builtins.h"
#include "recipe/jinja/value.h"

namespace deepinfer::recipe::jinja {

struct RenderLimits {
  int max_call_depth = 100;            // macro nesting; jinja2 hits Python's recursion limit near here
  int64_t max_loop_iterations = 1'000'000;  // over the whole render
  size_t max_output_bytes = size_t{64} << 20;  // a 128K-token prompt is about 0.5 MiB
};

class Evaluator {
 public:
  Evaluator(RenderLimits limits, Clock clock);

  // Throws RenderError with jinja2's message for a failure.
  Text render(const Body& body, std::vector<std::pair<std::string, Value>> variables);

 private:
  struct Scope {
    std::vector<std::pair<std::string, Value>> vars;
    std::shared_ptr<Scope> parent;
    void set(const std::string& name, Value v);
  };
  using ScopePtr = std::shared_ptr<Scope>;
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Body& body, const ScopePtr& scope, Text& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, Text& out);
  void exec_set(const Stmt& s, const ScopePtr& scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope, const Body& body,
                   const std::vector<std::pair<std::string, ExprPtr>>& params);
  void append(Text& out, const Text& piece);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_binary(const Expr& e, const ScopePtr& scope);
  Value eval_slice(const Expr& e, const ScopePtr& scope);
  CallArgs eval_args(const Expr& e, const ScopePtr& scope, size_t first_positional);
  Value lookup(const std::string& name, const ScopePtr& scope);

  RenderLimits limits_;
  Clock clock_;
  std::vector<ScopePtr> closure_scopes_;  // scopes that macros captured: cleared after the render
  // Namespaces given an attribute, cleared after the render too: the attribute may hold the
  // namespace itself (or a value holding it), a cycle of shared pointers that would leak.
  std::vector<std::shared_ptr<Dict>> assigned_namespaces_;
  std::unordered_set<const Dict*> assigned_namespace_set_;
  int call_depth_ = 0;
  int64_t loop_iterations_ = 0;
};

}  // namespace deepinfer::recipe::jinja
