#include "engine/text_stream.h"

#include <algorithm>

namespace deepinfer {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool include_stop_str_in_output)
    : decoder_(tokenizer), stop_(std::move(stop)), include_stop_(include_stop_str_in_output) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

TextPiece TextStream::push(std::span<const int32_t> tokens) {
  TextPiece out;
  for (int32_t id : tokens) {
    if (stopped_) break;
    ++out.n_tokens;
    if (advance(decoder_.push(id), /*final=*/false, &out)) break;
  }
  return out;
}

TextPiece TextStream::finish() {
  TextPiece out;
  if (!stopped_) advance(decoder_.finish(), /*final=*/true, &out);
  if (!stopped_) {
    out.text += held_;
    held_.clear();
  }
  return out;
}

bool TextStream::advance(const std::string& text, bool final, TextPiece* out) {
  held_ += text;
  // The earliest match wins; at the same position the longer stop string.
  size_t best = std::string::npos;
  const std::string* match = nullptr;
  for (const std::string& s : stop_) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    if (pos < best || (pos == best && s.size() > match->size())) {
      best = pos;
      match = &s;
    }
  }
  if (match != nullptr) {
    out->text += held_.substr(0, include_stop_ ? best + match->size() : best);
    out->stopped = true;
    out->stop_string = *match;
    held_.clear();
    stopped_ = true;
    return true;
  }
  if (final) return false;
  size_t keep = 0;  // longest suffix of held_ that is a proper prefix of a stop string
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  out->text += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return false;
}

}  // namespace deepinfer
