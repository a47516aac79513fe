// The input of a Responses custom tool call (apply_patch) from the streamed JSON arguments the
// model wrote for it: {"input": "<JSON string>"} -> the string's decoded text, delivered as the
// fragments arrive (internal to src/recipe).
//
// The arguments must start with `{`, `"input"`, `:` and `"` (whitespace between them allowed);
// while they may still do so nothing is emitted. Then the string is unescaped, an escape split
// across fragments (a `\uXXXX` or a surrogate pair) waits for its end, and the closing quote ends
// the input. Arguments that start otherwise pass through unchanged, as deepseek-recipe 0.2.0
// does. A plain value, one per call.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer::recipe {

class CustomToolInputDecoder {
 public:
  // The decoded text that `fragment` completes (possibly empty).
  std::string feed(std::string_view fragment);
  // End of the arguments: text still held back (arguments that ended inside the prefix).
  std::string finish();

 private:
  enum class Stage { kPrefix, kString, kDone, kPassThrough };
  std::string decode_pending();

  Stage stage_ = Stage::kPrefix;
  std::string pending_;  // kPrefix: raw text so far; kString: an unfinished escape
};

}  // namespace deepinfer::recipe
