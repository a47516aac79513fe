// The output parser fed token ids rather than text (recipe-spec.md §2.8 Token chunks).
//
// The recipe library does not link the tokenizer (it depends on core only), so the detokenizer
// is a template parameter: anything with `std::string push(int32_t id)` (the text the id
// completes; an incomplete UTF-8 sequence is held back) and `std::string finish()` (what is
// left), which deepinfer::IncrementalDecoder is. The server and the CLI instantiate it.
// One per response, fed from one thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "recipe/output_parser.h"

namespace deepinfer::recipe {

template <typename Decoder>
class TokenOutputParser {
 public:
  TokenOutputParser(const ParsingOptions& options, Decoder decoder)
      : parser_(options), decoder_(std::move(decoder)) {}

  // Ids after the output ended (a stop sequence, the end of the DSML block or of the JSON
  // value) are not read. The events are valid until the next feed() or finish(), as
  // OutputParser's are.
  const std::vector<OutputEvent>& feed(std::span<const int32_t> ids) {
    text_.clear();
    for (int32_t id : ids) {
      if (parser_.finished()) break;
      text_ += decoder_.push(id);
      ++tokens_;
    }
    return parser_.feed(text_);
  }
  const std::vector<OutputEvent>& feed(int32_t id) {
    return feed(std::span<const int32_t>(&id, 1));
  }

  // Once per response, so the two parts are simply joined.
  std::vector<OutputEvent> finish() {
    std::vector<OutputEvent> events;
    if (!parser_.finished()) events = parser_.feed(decoder_.finish());
    const std::vector<OutputEvent>& rest = parser_.finish();
    events.insert(events.end(), rest.begin(), rest.end());
    return events;
  }

  // Completion tokens: the ids read so far.
  int64_t tokens() const { return tokens_; }
  const OutputParser& parser() const { return parser_; }

 private:
  OutputParser parser_;
  Decoder decoder_;
  std::string text_;  // the text of the ids of one feed(), buffer kept across calls
  int64_t tokens_ = 0;
};

}  // namespace deepinfer::recipe
