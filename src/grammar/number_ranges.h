// Decimal numbers within bounds, as grammar expressions: the digit-by-digit range construction
// (an integer in [137, 4250] is 13[7-9] | 1[4-9]\d | [2-9]\d\d | [1-3]\d{3} | 4[01]\d\d | 42[0-4]\d | 4250).
//
// Integers take any bound (a fractional bound rounds inward: x >= 2.5 is x >= 3). Numbers take
// integer bounds and are written without an exponent; a fractional bound on a number is
// INVALID_ARGUMENT (not decidable digit by digit without arbitrary precision here). "-0" is
// never produced.
#pragma once

#include <cstdint>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct NumberBounds {
  bool has_lo = false, lo_excl = false;
  double lo = 0;
  bool has_hi = false, hi_excl = false;
  double hi = 0;

  void set_lower(double v, bool excl) {
    if (!has_lo || v > lo || (v == lo && excl)) lo = v, lo_excl = excl, has_lo = true;
  }
  void set_upper(double v, bool excl) {
    if (!has_hi || v < hi || (v == hi && excl)) hi = v, hi_excl = excl, has_hi = true;
  }
  bool bounded() const { return has_lo || has_hi; }
};

Result<ExprId> integer_range_expr(Grammar& g, const NumberBounds& b);
// frac_digits >= 0: at most that many digits after the point (multipleOf 10^-k); -1: any.
Result<ExprId> number_range_expr(Grammar& g, const NumberBounds& b, int32_t frac_digits);

}  // namespace deepinfer::grammar
