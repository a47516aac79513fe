// Streaming parser of DeepSeek V4 / V4.1 model output (recipe-spec.md §3): splits reasoning
// from the answer, turns DSML tool-call blocks (both spellings) into tool calls with JSON
// arguments, finds stop sequences and JSON output, whatever the chunking of the text.
//
// One parser per response, fed from one thread. Events are the deltas deepseek-recipe 0.2.0
// streams: one per run of one kind of text within one fed chunk, or one per marker label. A
// chunk's events are returned once all its bytes are classified: a chunk that ends in what may
// be the start of a marker waits for the next feed(). The merged events are the same for every
// chunking of the same output.
//
// feed() and finish() return the parser's own event buffer, valid until the next call of either:
// a response fed a token at a time makes millions of calls, so the parser keeps its buffers (and
// the text buffers of handed-over events) instead of allocating a vector per call. Copy the
// events (`std::vector<OutputEvent> events = parser.feed(...)`) to keep them longer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"

namespace deepinfer::recipe {

struct OutputEvent {
  enum class Kind {
    kContent,        // answer text
    kReasoning,      // reasoning text
    kToolCall,       // a tool call starts; text = its name (known in full)
    kToolArguments,  // a fragment of the current call's JSON arguments
  };
  Kind kind;
  std::string text;
};

class OutputParser {
 public:
  explicit OutputParser(const ParsingOptions& options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // The events of `chunk` (and of earlier chunks held back until now); valid until the next
  // feed() or finish().
  const std::vector<OutputEvent>& feed(std::string_view chunk);
  // End of output: releases what was held back. Valid until the next feed() or finish().
  const std::vector<OutputEvent>& finish();

  bool has_tool_calls() const;
  // The stop sequence that ended the output, if one did; input after it is ignored.
  const std::optional<std::string>& stop_sequence() const;
  // True once the output can carry nothing more: a stop sequence, the end of the DSML block, or
  // in JSON mode the end of the top-level JSON object or array. The caller stops generation
  // there. Text fed after a complete JSON value is still read as deepseek-recipe 0.2.0 reads it
  // (kept as content, or one space after a closing fence), so the events of any output stay the
  // reference's; a caller that stops feeding at finished() ends the answer at the value.
  bool finished() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The whole output at once, merged: what a non-streaming response holds.
struct ParsedOutput {
  std::string reasoning;
  std::string content;
  struct Call {
    std::string name;
    std::string arguments;
  };
  std::vector<Call> tool_calls;
  std::optional<std::string> stop_sequence;
};

// Folds events into `out` (consecutive fragments concatenate).
void accumulate(const std::vector<OutputEvent>& events, ParsedOutput& out);

}  // namespace deepinfer::recipe
