#include "recipe/jinja/evaluator.h"

#include <cmath>

namespace deepinfer::recipe::jinja {

namespace {

[[noreturn]] void undefined_error(const Value& v, const std::string& what) {
  throw RenderError(v.hint.empty() ? what : v.hint);
}

bool is_int_like(const Value& v) { return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool; }
int64_t int_of(const Value& v) { return v.kind == Value::Kind::kInt ? v.i : (v.b ? 1 : 0); }

// Integer arithmetic as Python's, within int64: where Python's unbounded integers would leave
// that range the render fails (no chat template needs such numbers; a hostile one must not
// reach undefined behaviour).
[[noreturn]] void integer_overflow(const std::string& op) { throw RenderError("integer overflow in '" + op + "'"); }

int64_t checked_add(int64_t x, int64_t y, const std::string& op) {
  int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) integer_overflow(op);
  return r;
}

int64_t checked_sub(int64_t x, int64_t y, const std::string& op) {
  int64_t r = 0;
  if (__builtin_sub_overflow(x, y, &r)) integer_overflow(op);
  return r;
}

int64_t checked_mul(int64_t x, int64_t y, const std::string& op) {
  int64_t r = 0;
  if (__builtin_mul_overflow(x, y, &r)) integer_overflow(op);
  return r;
}

// Python's // and % (the quotient rounds down, the remainder takes the divisor's sign); y != 0.
int64_t floor_div_or_mod(const std::string& op, int64_t x, int64_t y) {
  if (y == -1) return op == "%" ? 0 : checked_sub(0, x, op);  // x / -1 overflows for INT64_MIN
  int64_t q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    --q;
    r += y;
  }
  return op == "%" ? r : q;
}

int64_t power(int64_t base, int64_t exponent) {  // exponent >= 0, by squaring
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = checked_mul(result, base, "**");
    exponent >>= 1;
    if (exponent > 0) base = checked_mul(base, base, "**");
  }
  return result;
}

Value repeat(const Value& a, int64_t count) {
  if (a.is_string()) {
    const uint64_t total = repeated_size(a.text.str.size(), count);
    check_string_size(total);
    if (total == 0) return Value::string(Text());
    if (a.text.runs.size() > 1) {
      Text t;
      for (int64_t k = 0; k < count; ++k) t.append(a.text);
      return Value::string(std::move(t));
    }
    std::string s = a.text.str;  // one run: double the bytes rather than append them count times
    s.reserve(total);
    while (s.size() * 2 <= total) s += s;
    s.append(s, 0, total - s.size());
    return Value::string(Text(std::move(s), a.text.runs[0].trusted));
  }
  check_list_size(repeated_size(a.list->size(), count));
  List items;
  for (int64_t k = 0; k < count; ++k) items.insert(items.end(), a.list->begin(), a.list->end());
  return Value::new_list(std::move(items));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a, "undefined value used in '" + op + "'");
  if (b.is_undefined()) undefined_error(b, "undefined value used in '" + op + "'");
  if (a.is_number() && b.is_number()) {
    bool ints = is_int_like(a) && is_int_like(b);
    if (op == "/") {
      if (as_double(b) == 0) throw RenderError("division by zero");
      return Value::number(as_double(a) / as_double(b));
    }
    if (ints) {
      int64_t x = int_of(a), y = int_of(b);
      if (op == "+") return Value::integer(checked_add(x, y, op));
      if (op == "-") return Value::integer(checked_sub(x, y, op));
      if (op == "*") return Value::integer(checked_mul(x, y, op));
      if (op == "//" || op == "%") {
        if (y == 0) throw RenderError("integer division or modulo by zero");
        return Value::integer(floor_div_or_mod(op, x, y));
      }
      if (op == "**" && y >= 0) return Value::integer(power(x, y));
    }
    double x = as_double(a), y = as_double(b);
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) throw RenderError("float division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::number(r);
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    check_string_size(a.text.str.size() + b.text.str.size());
    bool markup = a.markup || b.markup;
    Text t = markup && !a.markup ? html_escape(a.text) : a.text;
    t.append(markup && !b.markup ? html_escape(b.text) : b.text);
    Value out = Value::string(std::move(t));
    out.markup = markup;
    return out;
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    check_list_size(a.list->size() + b.list->size());
    List items = *a.list;
    items.insert(items.end(), b.list->begin(), b.list->end());
    return Value::new_list(std::move(items));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && is_int_like(b)) return repeat(a, int_of(b));
  throw RenderError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw RenderError("'in <string>' requires string as left operand");
    return container.text.str.find(item.text.str) != std::string::npos;
  }
  if (container.is_mapping() || container.kind == Value::Kind::kNamespace) {
    for (const auto& kv : *container.dict) {
      if (equals(kv.first, item)) return true;
    }
    return false;
  }
  for (const Value& v : iterate(container)) {
    if (equals(v, item)) return true;
  }
  return false;
}

// Python slice bounds for a sequence of n elements.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto bound = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!is_int_like(v)) throw RenderError("slice indices must be integers or None");
    return int_of(v);
  };
  int64_t st = bound(step).value_or(1);
  if (st == 0) throw RenderError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t lo = clamp(bound(start), st > 0 ? 0 : n - 1);
  int64_t hi = clamp(bound(stop), st > 0 ? n : -1);
  // Counted in unsigned steps: lo + st may overflow for a vast step even where no index does.
  const uint64_t stride = st > 0 ? static_cast<uint64_t>(st) : 0 - static_cast<uint64_t>(st);
  const uint64_t span = st > 0 ? (lo < hi ? static_cast<uint64_t>(hi - lo) : 0)
                               : (lo > hi ? static_cast<uint64_t>(lo - hi) : 0);
  const uint64_t count = span == 0 ? 0 : (span - 1) / stride + 1;
  std::vector<int64_t> out;
  for (uint64_t i = 0; i < count; ++i) {
    const auto offset = static_cast<int64_t>(i * stride);  // below span, so it fits
    out.push_back(st > 0 ? lo + offset : lo - offset);
  }
  return out;
}

}  // namespace

void Evaluator::Scope::set(const std::string& name, Value v) {
  for (auto& [k, existing] : vars) {
    if (k == name) {
      existing = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Evaluator::Evaluator(RenderLimits limits, Clock clock) : limits_(limits), clock_(std::move(clock)) {}

Text Evaluator::render(const Body& body, std::vector<std::pair<std::string, Value>> variables) {
  auto root = std::make_shared<Scope>();
  root->vars = std::move(variables);
  struct CycleBreaker {  // on success and on error alike
    std::vector<ScopePtr>& scopes;
    std::vector<std::shared_ptr<Dict>>& namespaces;
    std::unordered_set<const Dict*>& namespace_set;
    ~CycleBreaker() {
      for (const ScopePtr& scope : scopes) {
        scope->vars.clear();
        scope->parent.reset();  // a macro kept in a namespace closes the cycle through the parent
      }
      scopes.clear();
      for (const std::shared_ptr<Dict>& ns : namespaces) ns->clear();
      namespaces.clear();
      namespace_set.clear();
    }
  } breaker{closure_scopes_, assigned_namespaces_, assigned_namespace_set_};
  Text out;
  exec(body, root, out);
  return out;
}

void Evaluator::append(Text& out, const Text& piece) {
  if (out.str.size() + piece.str.size() > limits_.max_output_bytes) {
    throw RenderError("template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out.append(piece);
}

Evaluator::Flow Evaluator::exec(const Body& body, const ScopePtr& scope, Text& out) {
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    switch (s.kind) {
      case Stmt::Kind::kText: append(out, Text(s.text, /*trusted=*/true)); break;
      case Stmt::Kind::kOutput: append(out, to_text(eval(*s.expr, scope))); break;
      case Stmt::Kind::kIf: {
        size_t branch = 0;
        while (branch < s.conditions.size() && !truthy(eval(*s.conditions[branch], scope))) ++branch;
        if (branch < s.bodies.size()) {
          Flow f = exec(s.bodies[branch], scope, out);
          if (f != Flow::kNormal) return f;
        }
        break;
      }
      case Stmt::Kind::kFor: exec_for(s, scope, out); break;
      case Stmt::Kind::kSet: exec_set(s, scope); break;
      case Stmt::Kind::kSetBlock: {
        Text captured;
        exec(s.bodies[0], scope, captured);
        scope->set(s.targets[0], Value::string(std::move(captured)));
        break;
      }
      case Stmt::Kind::kMacro: scope->set(s.text, make_macro(s, scope, s.bodies[0], s.params)); break;
      case Stmt::Kind::kCallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.args[0], scope);
        if (callee.kind != Value::Kind::kCallable) throw RenderError("call block target is not callable");
        CallArgs args = eval_args(call, scope, 1);
        args.keywords.emplace_back("caller", make_macro(s, scope, s.bodies[0], s.params));
        append(out, to_text((*callee.fn)(args)));
        break;
      }
      case Stmt::Kind::kFilterBlock: {
        Text captured;
        exec(s.bodies[0], scope, captured);
        CallArgs args = eval_args(*s.filter, scope, 1);
        append(out, to_text(apply_filter(s.filter->name, Value::string(std::move(captured)), args)));
        break;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kScope: {
        Flow f = exec(s.bodies[0], scope, out);
        if (f != Flow::kNormal) return f;
        break;
      }
    }
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, const ScopePtr& scope, Text& out) {
  Value iterable = eval(*s.expr, scope);
  List items = iterate(iterable);
  auto bind = [&](const ScopePtr& target, const Value& item) {
    if (s.targets.size() == 1) {
      target->set(s.targets[0], item);
      return;
    }
    List parts = iterate(item);
    if (parts.size() != s.targets.size()) {
      throw RenderError("cannot unpack " + std::to_string(parts.size()) + " values into " +
                        std::to_string(s.targets.size()) + " loop variables");
    }
    for (size_t k = 0; k < parts.size(); ++k) target->set(s.targets[k], parts[k]);
  };
  if (s.filter) {  // jinja2 filters before counting, so loop.index and loop.last see the kept items
    List kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      bind(probe, item);
      if (truthy(eval(*s.filter, probe))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (s.bodies.size() > 1) exec(s.bodies[1], scope, out);
    return Flow::kNormal;
  }
  const auto n = static_cast<int64_t>(items.size());
  // One loop object per loop, updated in place: building a fresh dict per iteration dominated
  // the cost of long loops.
  auto position = std::make_shared<int64_t>(0);
  Value loop = Value::new_dict({
      {Value::string("index", true), Value()},
      {Value::string("index0", true), Value()},
      {Value::string("revindex", true), Value()},
      {Value::string("revindex0", true), Value()},
      {Value::string("first", true), Value()},
      {Value::string("last", true), Value()},
      {Value::string("length", true), Value::integer(n)},
      {Value::string("depth", true), Value::integer(1)},
      {Value::string("depth0", true), Value::integer(0)},
      {Value::string("previtem", true), Value()},
      {Value::string("nextitem", true), Value()},
      {Value::string("cycle", true), Value::callable([position](CallArgs& args) {
         if (args.positional.empty()) throw RenderError("no items for cycling given");
         return args.positional[*position % args.positional.size()];
       })},
  });
  Dict& fields = *loop.dict;
  for (int64_t k = 0; k < n; ++k) {
    if (++loop_iterations_ > limits_.max_loop_iterations) {
      throw RenderError("template loops ran more than " + std::to_string(limits_.max_loop_iterations) +
                        " iterations");
    }
    *position = k;
    fields[0].second = Value::integer(k + 1);
    fields[1].second = Value::integer(k);
    fields[2].second = Value::integer(n - k);
    fields[3].second = Value::integer(n - k - 1);
    fields[4].second = Value::boolean(k == 0);
    fields[5].second = Value::boolean(k == n - 1);
    fields[9].second = k > 0 ? items[k - 1] : Value::undefined("there is no previous item");
    fields[10].second = k + 1 < n ? items[k + 1] : Value::undefined("there is no next item");
    auto body_scope = std::make_shared<Scope>();
    body_scope->parent = scope;
    body_scope->vars.emplace_back("loop", loop);
    bind(body_scope, items[k]);
    if (exec(s.bodies[0], body_scope, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Evaluator::exec_set(const Stmt& s, const ScopePtr& scope) {
  Value v = eval(*s.expr, scope);
  if (!s.attr.empty()) {
    Value target = lookup(s.targets[0], scope);
    if (target.kind != Value::Kind::kNamespace) throw RenderError("cannot assign attribute on non-namespace object");
    if (assigned_namespace_set_.insert(target.dict.get()).second) assigned_namespaces_.push_back(target.dict);
    for (auto& [k, existing] : *target.dict) {
      if (k.text.str == s.attr) {
        existing = std::move(v);
        return;
      }
    }
    target.dict->emplace_back(Value::string(s.attr, true), std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope->set(s.targets[0], std::move(v));
    return;
  }
  List parts = iterate(v);
  if (parts.size() != s.targets.size()) throw RenderError("cannot unpack values in set");
  for (size_t k = 0; k < parts.size(); ++k) scope->set(s.targets[k], parts[k]);
}

Value Evaluator::make_macro(const Stmt& s, const ScopePtr& scope, const Body& body,
                            const std::vector<std::pair<std::string, ExprPtr>>& params) {
  // The AST outlives the render and the evaluator outlives every value it makes, so raw
  // pointers are safe here. The macro keeps its defining scope alive (it may be called after
  // a loop body ends); the macro is usually stored in that scope, so render() breaks the
  // cycle when it finishes.
  const Body* body_ptr = &body;
  const auto* params_ptr = &params;
  std::string name = s.text;
  closure_scopes_.push_back(scope);
  return Value::callable([this, body_ptr, params_ptr, scope, name](CallArgs& args) {
    if (++call_depth_ > limits_.max_call_depth) {
      throw RenderError("maximum recursion depth exceeded in macro '" + name + "'");
    }
    auto local = std::make_shared<Scope>();
    local->parent = scope;
    const auto& ps = *params_ptr;
    for (size_t k = 0; k < ps.size(); ++k) {
      const std::string& pname = ps[k].first;
      const Value* given = k < args.positional.size() ? &args.positional[k] : nullptr;
      for (auto& [kw, v] : args.keywords) {
        if (kw == pname) given = &v;
      }
      if (given) local->set(pname, *given);
      else if (ps[k].second) local->set(pname, eval(*ps[k].second, local));
      else local->set(pname, Value::undefined("'" + pname + "' is undefined"));
    }
    for (auto& [kw, v] : args.keywords) {
      if (kw == "caller") local->set("caller", v);
    }
    List varargs;
    for (size_t k = ps.size(); k < args.positional.size(); ++k) varargs.push_back(args.positional[k]);
    local->set("varargs", Value::new_list(std::move(varargs)));
    Text out;
    exec(*body_ptr, local, out);
    --call_depth_;
    return Value::string(std::move(out));
  });
}

Value Evaluator::lookup(const std::string& name, const ScopePtr& scope) {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    for (const auto& [k, v] : s->vars) {
      if (k == name) return v;
    }
  }
  Value global = make_global(name, clock_);
  if (!global.is_undefined()) return global;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Evaluator::eval_args(const Expr& e, const ScopePtr& scope, size_t first_positional) {
  CallArgs args;
  for (size_t k = first_positional; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k], scope));
  for (const auto& [name, value] : e.keywords) args.keywords.emplace_back(name, eval(*value, scope));
  return args;
}

Value Evaluator::eval(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return lookup(e.name, scope);
    case Expr::Kind::kAttr: {
      Value obj = eval(*e.args[0], scope);
      if (obj.is_undefined()) undefined_error(obj, "undefined value has no attribute '" + e.name + "'");
      Value v = get_attribute(obj, e.name);
      if (v.is_undefined() && v.hint.empty()) {
        v.hint = std::string("'") + type_name(obj) + " object' has no attribute '" + e.name + "'";
      }
      return v;
    }
    case Expr::Kind::kItem: {
      Value obj = eval(*e.args[0], scope);
      Value key = eval(*e.args[1], scope);
      Value v = get_item(obj, key);
      if (v.is_undefined() && key.is_string()) {
        Value method = get_attribute(obj, key.text.str);
        if (method.kind == Value::Kind::kCallable) return method;
      }
      return v;
    }
    case Expr::Kind::kSlice: return eval_slice(e, scope);
    case Expr::Kind::kCall: {
      Value callee = eval(*e.args[0], scope);
      if (callee.kind != Value::Kind::kCallable) {
        if (callee.is_undefined()) undefined_error(callee, "undefined value is not callable");
        throw RenderError(std::string("'") + type_name(callee) + "' object is not callable");
      }
      CallArgs args = eval_args(e, scope, 1);
      return (*callee.fn)(args);
    }
    case Expr::Kind::kFilter: {
      Value input = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, scope, 1);
      return apply_filter(e.name, input, args);
    }
    case Expr::Kind::kTest: {
      Value input = eval(*e.args[0], scope);
      CallArgs args = eval_args(e, scope, 1);
      return Value::boolean(apply_test(e.name, input, args) != e.negated);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.args[0], scope);
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (!v.is_number()) {
        if (v.is_undefined()) undefined_error(v, "undefined value used with unary " + e.name);
        throw RenderError(std::string("bad operand type for unary ") + e.name + ": '" + type_name(v) + "'");
      }
      if (e.name == "+") return v;
      if (v.kind == Value::Kind::kFloat) return Value::number(-v.f);
      return Value::integer(checked_sub(0, int_of(v), "-"));
    }
    case Expr::Kind::kBinary: return eval_binary(e, scope);
    case Expr::Kind::kAnd: {
      Value left = eval(*e.args[0], scope);
      return truthy(left) ? eval(*e.args[1], scope) : left;
    }
    case Expr::Kind::kOr: {
      Value left = eval(*e.args[0], scope);
      return truthy(left) ? left : eval(*e.args[1], scope);
    }
    case Expr::Kind::kCondition: {
      if (truthy(eval(*e.args[0], scope))) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the inline if expression evaluated to false and no else section was defined");
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == Expr::Kind::kTuple ? Value::new_tuple(std::move(items)) : Value::new_list(std::move(items));
    }
    case Expr::Kind::kDict: {
      Dict items;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], scope);
        Value value = eval(*e.args[k + 1], scope);
        bool replaced = false;
        for (auto& kv : items) {
          if (equals(kv.first, key)) {
            kv.second = value;
            replaced = true;
          }
        }
        if (!replaced) items.emplace_back(std::move(key), std::move(value));
      }
      return Value::new_dict(std::move(items));
    }
  }
  return Value::undefined();
}

Value Evaluator::eval_binary(const Expr& e, const ScopePtr& scope) {
  Value a = eval(*e.args[0], scope);
  Value b = eval(*e.args[1], scope);
  const std::string& op = e.name;
  if (op == "==") return Value::boolean(equals(a, b));
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "<") return Value::boolean(compare(a, b) < 0);
  if (op == "<=") return Value::boolean(compare(a, b) <= 0);
  if (op == ">") return Value::boolean(compare(a, b) > 0);
  if (op == ">=") return Value::boolean(compare(a, b) >= 0);
  if (op == "in") return Value::boolean(contains(b, a));
  if (op == "not in") return Value::boolean(!contains(b, a));
  if (op == "~") {
    Text t = to_text(a);
    Text right = to_text(b);
    check_string_size(t.str.size() + right.str.size());
    t.append(right);
    return Value::string(std::move(t));
  }
  if (op == "%" && a.is_string()) throw RenderError("printf-style string formatting is not supported");
  return arithmetic(op, a, b);
}

Value Evaluator::eval_slice(const Expr& e, const ScopePtr& scope) {
  Value target = eval(*e.args[0], scope);
  Value bounds[3];
  for (int k = 0; k < 3; ++k) {
    if (e.args[k + 1]) bounds[k] = eval(*e.args[k + 1], scope);
  }
  if (target.is_list()) {
    List out;
    for (int64_t k : slice_indices(static_cast<int64_t>(target.list->size()), bounds[0], bounds[1], bounds[2])) {
      out.push_back((*target.list)[k]);
    }
    return Value::new_list(std::move(out));
  }
  if (target.is_string()) {
    const std::string& s = target.text.str;
    std::vector<size_t> starts;  // byte offset of each character (see is_continuation_byte), plus the end
    for (size_t k = 0; k < s.size(); ++k) {
      if (k == 0 || !is_continuation_byte(s[k])) starts.push_back(k);
    }
    const auto n = static_cast<int64_t>(starts.size());
    starts.push_back(s.size());
    Text out;
    std::vector<int64_t> picks = slice_indices(n, bounds[0], bounds[1], bounds[2]);
    bool contiguous = !picks.empty() && picks.back() - picks.front() + 1 == static_cast<int64_t>(picks.size());
    if (contiguous) {
      out = target.text.slice(starts[picks.front()], starts[picks.back() + 1] - starts[picks.front()]);
    } else {
      for (int64_t k : picks) out.append(target.text.slice(starts[k], starts[k + 1] - starts[k]));
    }
    return Value::string(std::move(out));
  }
  if (target.is_undefined()) undefined_error(target, "undefined value cannot be sliced");
  throw RenderError(std::string("'") + type_name(target) + "' object is not subscriptable");
}

}  // namespace deepinfer::recipe::jinja
