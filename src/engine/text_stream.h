// TextStream: one sequence's generated text, detokenized incrementally and cut at stop strings.
//
// Owned by the request handle and used on the caller's thread (the engine thread never
// detokenizes). Text is released only when it is complete UTF-8 and cannot be the start of a
// stop string any more: the longest suffix of the text so far that is a proper prefix of some
// stop string is held back, so a stop string spanning several tokens is still found whole.
// Any match starts inside the held-back part, because everything before it was released only
// after it could no longer begin one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer {

struct TextPiece {
  std::string text;         // released by this call
  bool stopped = false;     // a stop string matched: the sequence ends here
  std::string stop_string;  // the one that matched
  size_t n_tokens = 0;      // tokens consumed: those after the matching one are dropped
};

class TextStream {
 public:
  // `tokenizer` must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool include_stop_str_in_output);

  // The next tokens of the sequence, in order. Once stopped, nothing more is released.
  TextPiece push(std::span<const int32_t> tokens);
  // The sequence ended for another reason: releases what was held back (and a trailing
  // incomplete character as U+FFFD), unless a stop string completes there.
  TextPiece finish();

  bool stopped() const { return stopped_; }

 private:
  // Appends `text` to the held-back text and releases what can go; true on a stop match.
  bool advance(const std::string& text, bool final, TextPiece* out);

  IncrementalDecoder decoder_;
  std::vector<std::string> stop_;
  bool include_stop_ = false;
  std::string held_;  // text not yet released (a possible stop-string start, or all of it at the end)
  bool stopped_ = false;
};

}  // namespace deepinfer
