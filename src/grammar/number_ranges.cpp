#include "grammar/number_ranges.h"

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

namespace deepinfer::grammar {

namespace {

constexpr double kLimit = 9e15;  // bounds beyond this are not exact in a double

ExprId digit(Grammar& g) { return g.byte_range('0', '9'); }

// Digit strings of lo's length between lo and hi (equal lengths, leading zeros allowed).
ExprId range_eq(Grammar& g, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return g.empty();
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos) {
    return g.repeat(digit(g), static_cast<int32_t>(lo.size()), static_cast<int32_t>(lo.size()));
  }
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo[0] == hi[0]) return g.seq({g.bytes(std::string(1, lo[0])), range_eq(g, lo_rest, hi_rest)});
  std::vector<ExprId> alts;
  alts.push_back(g.seq({g.bytes(std::string(1, lo[0])), range_eq(g, lo_rest, std::string(lo_rest.size(), '9'))}));
  if (lo[0] + 1 <= hi[0] - 1) {
    alts.push_back(g.seq({g.byte_range(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)),
                          g.repeat(digit(g), static_cast<int32_t>(lo_rest.size()), static_cast<int32_t>(lo_rest.size()))}));
  }
  alts.push_back(g.seq({g.bytes(std::string(1, hi[0])), range_eq(g, std::string(hi_rest.size(), '0'), hi_rest)}));
  return g.alt(std::move(alts));
}

// Integers in [a, b] (b nullopt: unbounded) written without leading zeros.
ExprId uint_range(Grammar& g, uint64_t a, std::optional<uint64_t> b) {
  if (b && *b < a) return g.nothing();
  const std::string sa = std::to_string(a);
  std::vector<ExprId> alts;
  const size_t len_b = b ? std::to_string(*b).size() : sa.size();
  for (size_t len = sa.size(); len <= len_b; ++len) {
    std::string lo = sa;
    if (len != sa.size()) lo.assign(len, '0'), lo[0] = '1';  // 10...0; not "1" + string (GCC 12 -Wrestrict)
    std::string hi = b && len == len_b ? std::to_string(*b) : std::string(len, '9');
    alts.push_back(range_eq(g, lo, hi));
  }
  if (!b) {
    alts.push_back(g.seq({g.byte_range('1', '9'), g.repeat(digit(g), static_cast<int32_t>(sa.size()), kUnbounded)}));
  }
  return g.alt(std::move(alts));
}

struct Frac {
  ExprId any_opt, nonzero, zero_opt;
};

Frac fractions(Grammar& g, int32_t frac_digits) {
  const ExprId d = digit(g);
  const int32_t k = frac_digits;
  Frac f;
  if (k < 0) {
    f.any_opt = g.optional(g.seq({g.bytes("."), g.plus(d)}));
    f.nonzero = g.seq({g.bytes("."), g.star(d), g.byte_range('1', '9'), g.star(d)});
    f.zero_opt = g.optional(g.seq({g.bytes("."), g.plus(g.bytes("0"))}));
  } else if (k == 0) {
    f.any_opt = g.empty();
    f.nonzero = g.nothing();
    f.zero_opt = g.empty();
  } else {
    f.any_opt = g.optional(g.seq({g.bytes("."), g.repeat(d, 1, k)}));
    f.nonzero = g.seq({g.bytes("."), g.repeat(d, 0, k - 1), g.byte_range('1', '9')});
    f.zero_opt = g.optional(g.seq({g.bytes("."), g.repeat(g.bytes("0"), 1, k)}));
  }
  return f;
}

// Decimals v >= 0 with a <= v <= b (exclusive ends as flagged; b nullopt: unbounded).
ExprId nonneg_decimal(Grammar& g, uint64_t a, bool a_excl, std::optional<uint64_t> b, bool b_excl, const Frac& f) {
  std::vector<ExprId> alts;
  const ExprId sa = g.bytes(std::to_string(a));
  if (b && *b == a) {
    if (!a_excl && !b_excl) alts.push_back(g.seq({sa, f.zero_opt}));
    return g.alt(std::move(alts));
  }
  alts.push_back(g.seq({sa, a_excl ? f.nonzero : f.any_opt}));
  if (!b || *b > a + 1) alts.push_back(g.seq({uint_range(g, a + 1, b ? std::optional<uint64_t>(*b - 1) : std::nullopt), f.any_opt}));
  if (b && !b_excl) alts.push_back(g.seq({g.bytes(std::to_string(*b)), f.zero_opt}));
  return g.alt(std::move(alts));
}

Status check_bound(double v) {
  if (std::fabs(v) > kLimit) return invalid_argument("numeric bound " + std::to_string(v) + " is too large");
  return Status::ok_status();
}

}  // namespace

Result<ExprId> integer_range_expr(Grammar& g, const NumberBounds& b) {
  std::optional<int64_t> lo, hi;
  if (b.has_lo) {
    DI_RETURN_IF_ERROR(check_bound(b.lo));
    lo = static_cast<int64_t>(b.lo_excl ? std::floor(b.lo) + 1 : std::ceil(b.lo));
  }
  if (b.has_hi) {
    DI_RETURN_IF_ERROR(check_bound(b.hi));
    hi = static_cast<int64_t>(b.hi_excl ? std::ceil(b.hi) - 1 : std::floor(b.hi));
  }
  if (lo && hi && *hi < *lo) return g.nothing();
  std::vector<ExprId> alts;
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alts.push_back(uint_range(g, a, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    alts.push_back(g.seq({g.bytes("-"), uint_range(g, a, lo ? std::optional<uint64_t>(static_cast<uint64_t>(-*lo)) : std::nullopt)}));
  }
  return g.alt(std::move(alts));
}

Result<ExprId> number_range_expr(Grammar& g, const NumberBounds& b, int32_t frac_digits) {
  for (const auto& [has, v, name] : {std::tuple{b.has_lo, b.lo, "lower"}, std::tuple{b.has_hi, b.hi, "upper"}}) {
    if (!has) continue;
    DI_RETURN_IF_ERROR(check_bound(v));
    if (v != std::floor(v)) {
      return invalid_argument(std::string("a fractional ") + name + " bound (" + std::to_string(v) + ") on a number is not supported");
    }
  }
  if (b.has_lo && b.has_hi && (b.hi < b.lo || (b.hi == b.lo && (b.lo_excl || b.hi_excl)))) return g.nothing();
  const Frac f = fractions(g, frac_digits);
  std::vector<ExprId> alts;
  if (!b.has_hi || b.hi > 0 || (b.hi == 0 && !b.hi_excl)) {
    const bool from_lo = b.has_lo && b.lo >= 0;
    const uint64_t a = from_lo ? static_cast<uint64_t>(b.lo) : 0;
    alts.push_back(nonneg_decimal(g, a, from_lo && b.lo_excl,
                                  b.has_hi ? std::optional<uint64_t>(static_cast<uint64_t>(b.hi)) : std::nullopt, b.hi_excl, f));
  }
  if (!b.has_lo || b.lo < 0) {
    // v = -y, y > 0: y from max(-hi, 0) up to -lo.
    const bool from_hi = b.has_hi && b.hi < 0;
    const uint64_t a = from_hi ? static_cast<uint64_t>(-b.hi) : 0;
    alts.push_back(g.seq({g.bytes("-"), nonneg_decimal(g, a, from_hi ? b.hi_excl : true,
                                                       b.has_lo ? std::optional<uint64_t>(static_cast<uint64_t>(-b.lo)) : std::nullopt,
                                                       b.lo_excl, f)}));
  }
  return g.alt(std::move(alts));
}

}  // namespace deepinfer::grammar
