// The parsed form of a template: expressions and statements as plain trees, owned by the
// ChatTemplate and read-only while rendering (one parse, many concurrent renders).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "recipe/jinja/value.h"

namespace deepinfer::recipe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]], absent bounds are null pointers
    kCall,      // args[0](args[1:], keywords)
    kFilter,    // args[0] | name(args[1:], keywords)
    kTest,      // args[0] is [not] name(args[1:])
    kUnary,     // name in {"-", "+", "not"}
    kBinary,    // args[0] name args[1], name an operator or "in", "not in"
    kAnd,
    kOr,
    kCondition, // args[1] if args[0] else args[2] (args[2] may be null)
    kList,
    kTuple,
    kDict,      // args alternate key, value
  };
  Kind kind;
  std::string name;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool negated = false;  // "is not"
  size_t pos = 0;        // byte offset in the source, for error messages
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // conditions[i] guards bodies[i]; a trailing extra body is the else
    kFor,        // for targets in expr [if filter] : bodies[0], else bodies[1]
    kSet,        // targets (or target.attr when attr is set) = expr
    kSetBlock,   // {% set name %}bodies[0]{% endset %}
    kMacro,      // name(params with defaults) : bodies[0]
    kCallBlock,  // {% call expr %}bodies[0]{% endcall %}; params for caller(...)
    kFilterBlock,  // {% filter expr %} bodies[0]: expr's filter applied to the rendered body
    kBreak,
    kContinue,
    kScope,      // bodies[0] rendered in place ({% generation %})
  };
  Kind kind;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  size_t pos = 0;
};

}  // namespace deepinfer::recipe::jinja
