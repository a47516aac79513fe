// Tokens to statement trees, with jinja2's grammar and operator precedence. Unknown tags,
// filters and tests are errors here, at parse time, as jinja2 reports them when compiling.
#pragma once

#include "deepinfer/status.h"
#include "recipe/jinja/ast.h"
#include "recipe/jinja/lexer.h"

namespace deepinfer::recipe::jinja {

Result<Body> parse(const LexedTemplate& lexed);

}  // namespace deepinfer::recipe::jinja
