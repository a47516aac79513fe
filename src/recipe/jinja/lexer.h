// Splitting a template into tokens the way jinja2's lexer does with trim_blocks and
// lstrip_blocks on (transformers' settings): text, {{ }}, {% %} with their whitespace control,
// comments dropped, raw blocks kept as text, and the tokens of the expressions inside tags.
#pragma once

#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::recipe::jinja {

enum class TokenKind {
  kData,        // literal template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  size_t pos = 0;  // byte offset in the normalized source, for line:column in errors
};

struct LexedTemplate {
  std::string source;  // newlines normalized to \n, one trailing newline dropped (as jinja2)
  std::vector<Token> tokens;  // ends with kEnd
};

Result<LexedTemplate> lex(const std::string& source);

// "line 3, column 7" for a byte offset.
std::string describe_position(const std::string& source, size_t pos);

}  // namespace deepinfer::recipe::jinja
