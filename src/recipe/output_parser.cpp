#include "recipe/output_parser.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "recipe/prompt_json.h"

namespace deepinfer::recipe {
namespace {

// --- matchers (recipe-spec.md §3.2) --------------------------------------------------------

enum class MatcherKind { kString, kNewlinesAndString, kLeadingNewline };

// Incremental KMP over one literal; kNewlinesAndString also swallows the newlines right before
// the literal, so a marker takes them with it.
class Matcher {
 public:
  Matcher(MatcherKind kind, std::string pattern) : kind_(kind), pattern_(std::move(pattern)) {
    fail_.assign(pattern_.size(), 0);
    for (size_t i = 1, k = 0; i < pattern_.size(); ++i) {
      while (k > 0 && pattern_[i] != pattern_[k]) k = fail_[k - 1];
      if (pattern_[i] == pattern_[k]) ++k;
      fail_[i] = k;
    }
  }

  // Returns true when this byte completes a match.
  bool feed(char c) {
    if (kind_ == MatcherKind::kLeadingNewline) return fed_++ == 0 && c == '\n';
    if (kind_ == MatcherKind::kNewlinesAndString && matched_ == 0 && c == '\n') {
      ++newlines_;
      return false;
    }
    const size_t before = matched_;
    while (matched_ > 0 && pattern_[matched_] != c) matched_ = fail_[matched_ - 1];
    if (pattern_[matched_] == c) ++matched_;
    if (matched_ != before + 1) newlines_ = 0;  // the newlines no longer touch the marker
    return matched_ == pattern_.size();
  }

  // No byte fed so far can be part of a match, so only a byte in start_bytes() can begin one.
  bool idle() const {
    if (kind_ == MatcherKind::kLeadingNewline) return fed_ > 0;
    return matched_ == 0 && newlines_ == 0;
  }
  // Bytes that can move an idle matcher.
  void add_start_bytes(std::array<bool, 256>& starts) const {
    if (kind_ != MatcherKind::kString) starts['\n'] = true;
    if (!pattern_.empty()) starts[static_cast<unsigned char>(pattern_[0])] = true;
  }
  // `n` bytes outside start_bytes() fed to an idle matcher: only the count changes.
  void skip(size_t n) { fed_ += n; }

  // Bytes at the end of the input that may still become part of a match.
  size_t partial() const {
    if (kind_ == MatcherKind::kLeadingNewline) return 0;
    return matched_ + newlines_;
  }
  size_t match_length() const {
    return kind_ == MatcherKind::kLeadingNewline ? 1 : matched_ + newlines_;
  }

 private:
  MatcherKind kind_;
  std::string pattern_;
  std::vector<size_t> fail_;
  size_t matched_ = 0;
  size_t newlines_ = 0;
  size_t fed_ = 0;
};

// --- stages (recipe-spec.md §3.3) ----------------------------------------------------------

enum class StageId {
  kCommon,
  kJson,
  kMatchedJson,
  kToolCalls,
  kToolName,
  kArgs,
  kParamName,
  kParamType,
  kParamValue,
  kReasoning,
  kTaggedCall,  // inside <tool_call>...</tool_call> (ToolCallFormat::kTaggedJson)
  kFinished,
};

struct Stage {
  StageId id = StageId::kCommon;
  bool flag = false;  // kCommon / kReasoning: strip leading newlines; kArgs: no parameter yet;
                      // kParamValue: the value is a string
};

enum class ActionKind {
  kRaw,
  kReasoning,
  kSkip,
  kToSpace,
  kToolName,
  kToolCallBegin,
  kToolNameEnd,
  kLabel,
  kArgsEnd,
  kParamNameStart,
  kParamNameEnd,
  kRawArgs,
  kRawArgsString,
  kStopSequence,
  kTaggedCallBegin,
  kTaggedCallBody,
  kTaggedCallEnd,
};

struct Action {
  Action() = default;
  Action(ActionKind k, std::string t = "") : kind(k), text(std::move(t)) {}  // NOLINT: implicit
  ActionKind kind = ActionKind::kSkip;
  std::string text;  // kLabel / kArgsEnd: the literal to emit
};

struct Branch {
  Matcher matcher;
  Stage next;
  Action action;
};

constexpr const char* kDsmlStart = "<｜DSML｜";
constexpr const char* kDsmlClose = "</｜DSML｜";
constexpr const char* kTaggedCallStart = "<tool_call>";
constexpr const char* kTaggedCallEnd = "</tool_call>";

}  // namespace

struct OutputParser::State {
  ParsingOptions options;
  Stage stage;
  std::vector<Branch> branches;
  std::array<bool, 256> start_bytes{};  // bytes that can begin a match of some branch
  Action unmatched;
  std::string pending;                  // bytes of this stage not yet classified
  std::vector<uint32_t> pending_chunk;  // the fed chunk each pending byte came in
  uint32_t chunk = 0;                   // number of feed() calls so far
  std::string tool_name;
  std::string tagged_call;  // the JSON of a <tool_call> block so far
  bool has_tool_calls = false;
  bool finished = false;
  bool last_was_space = false;      // ToSpace runs become one space
  bool open_run = false;            // out.back() is unmatched text that may still grow
  std::vector<uint32_t> out_chunk;  // the chunk each event of `out` belongs to
  std::optional<std::string> stop_sequence;
  std::vector<OutputEvent> out;

  void enter(Stage s) {
    stage = s;
    pending.clear();
    pending_chunk.clear();
    branches.clear();
    auto add = [&](MatcherKind k, std::string pattern, Stage next, Action a) {
      branches.push_back({Matcher(k, std::move(pattern)), next, std::move(a)});
    };
    auto stops = [&] {
      for (const std::string& s : options.stop_sequences) {
        if (!s.empty())
          add(MatcherKind::kString, s, {StageId::kFinished}, {ActionKind::kStopSequence});
      }
    };
    const bool tools = options.parse_tool_calls;
    // Where a tool call may begin, the marker of the model's format starts it.
    auto tool_start = [&] {
      if (!tools) return;
      if (options.tool_call_format == ToolCallFormat::kTaggedJson) {
        add(MatcherKind::kNewlinesAndString, kTaggedCallStart, {StageId::kTaggedCall},
            {ActionKind::kTaggedCallBegin});
      } else {
        add(MatcherKind::kNewlinesAndString, kDsmlStart, {StageId::kToolCalls},
            {ActionKind::kSkip});
      }
    };
    switch (s.id) {
      case StageId::kCommon:
        if (options.parse_json_output) {
          add(MatcherKind::kString, "```json\n", {StageId::kJson}, {ActionKind::kSkip});
          add(MatcherKind::kString, "```\n", {StageId::kJson}, {ActionKind::kSkip});
          add(MatcherKind::kString, "{", {StageId::kJson}, {ActionKind::kLabel, "{"});
          add(MatcherKind::kString, "[", {StageId::kJson}, {ActionKind::kLabel, "["});
          tool_start();
          add(MatcherKind::kString, "</think>", {StageId::kCommon, false}, {ActionKind::kSkip});
          unmatched = {ActionKind::kToSpace};
          break;
        }
        stops();
        tool_start();
        if (s.flag) add(MatcherKind::kLeadingNewline, "", s, {ActionKind::kSkip});
        // A stray end of thinking in the answer is dropped.
        add(MatcherKind::kString, "</think>", {StageId::kCommon, false}, {ActionKind::kSkip});
        unmatched = {ActionKind::kRaw};
        break;
      case StageId::kJson:
        stops();
        add(MatcherKind::kString, "\n```", {StageId::kMatchedJson}, {ActionKind::kSkip});
        unmatched = {ActionKind::kRaw};
        break;
      case StageId::kMatchedJson:
        tool_start();
        unmatched = {ActionKind::kToSpace};
        break;
      case StageId::kToolCalls:
        add(MatcherKind::kString, "invoke name=\"", {StageId::kToolName},
            {ActionKind::kToolCallBegin});
        add(MatcherKind::kString, std::string(kDsmlClose) + "tool_calls>", {StageId::kFinished},
            {ActionKind::kSkip});
        add(MatcherKind::kString, std::string(kDsmlClose) + " calls>", {StageId::kFinished},
            {ActionKind::kSkip});
        unmatched = {ActionKind::kSkip};
        break;
      case StageId::kToolName:
        add(MatcherKind::kString, "\"", {StageId::kArgs, true}, {ActionKind::kToolNameEnd});
        unmatched = {ActionKind::kToolName};
        break;
      case StageId::kArgs:
        add(MatcherKind::kString, "parameter name=\"", {StageId::kParamName},
            {ActionKind::kParamNameStart, s.flag ? "{" : ", "});
        add(MatcherKind::kString, kDsmlClose, {StageId::kToolCalls},
            {ActionKind::kArgsEnd, s.flag ? "{}" : "}"});
        unmatched = {ActionKind::kSkip};
        break;
      case StageId::kParamName:
        // The quoted name (not escaped) streams as one run with its quotes, as in the reference.
        add(MatcherKind::kString, "\"", {StageId::kParamType}, {ActionKind::kParamNameEnd});
        unmatched = {ActionKind::kRawArgs};
        break;
      case StageId::kParamType:
        add(MatcherKind::kString, "true\">", {StageId::kParamValue, true},
            {ActionKind::kLabel, "\""});
        add(MatcherKind::kString, "false\">", {StageId::kParamValue, false}, {ActionKind::kSkip});
        unmatched = {ActionKind::kSkip};
        break;
      case StageId::kParamValue:
        add(MatcherKind::kString, kDsmlClose, {StageId::kArgs, false},
            s.flag ? Action{ActionKind::kLabel, "\""} : Action{ActionKind::kSkip});
        unmatched = {s.flag ? ActionKind::kRawArgsString : ActionKind::kRawArgs};
        break;
      case StageId::kReasoning:
        tool_start();
        if (s.flag) add(MatcherKind::kLeadingNewline, "", s, {ActionKind::kSkip});
        add(MatcherKind::kNewlinesAndString, "</think>", {StageId::kCommon, true},
            {ActionKind::kSkip});
        unmatched = {ActionKind::kReasoning};
        break;
      case StageId::kTaggedCall:
        // The block is read whole: a model may write "arguments" before "name".
        add(MatcherKind::kString, kTaggedCallEnd, {StageId::kCommon, true},
            {ActionKind::kTaggedCallEnd});
        unmatched = {ActionKind::kTaggedCallBody};
        break;
      case StageId::kFinished:
        unmatched = {ActionKind::kSkip};
        break;
    }
    start_bytes.fill(false);
    for (const Branch& b : branches) b.matcher.add_start_bytes(start_bytes);
  }

  // Length of the run at the start of `text` that no branch can match any byte of: such bytes
  // are only appended, which is most of the output (the byte-by-byte matching is the slow part).
  size_t plain_run(std::string_view text) const {
    for (const Branch& b : branches) {
      if (!b.matcher.idle()) return 0;
    }
    size_t n = 0;
    while (n < text.size() && !start_bytes[static_cast<unsigned char>(text[n])]) ++n;
    return n;
  }

  void feed_plain(std::string_view bytes) {
    pending.append(bytes);
    pending_chunk.insert(pending_chunk.end(), bytes.size(), chunk);
    for (Branch& b : branches) b.matcher.skip(bytes.size());
  }

  // One event per segment, as the reference sends one delta per segment: a run of bytes with
  // one action inside one fed chunk, or one marker's label.
  // Events follow the reference's deltas: one per run of one action within one fed chunk, or
  // one per marker label. A run of unmatched text grows (open_run) until something else is
  // emitted.
  void push(OutputEvent::Kind kind, std::string_view text, uint32_t in_chunk,
            bool unmatched_text = false) {
    if (text.empty()) return;
    if (unmatched_text && open_run && !out.empty() && out.back().kind == kind &&
        out_chunk.back() == in_chunk) {
      out.back().text += text;
    } else {
      out.push_back({kind, std::string(text)});
      out_chunk.push_back(in_chunk);
    }
    open_run = unmatched_text;
  }

  // Text of pending[begin, end), one push per fed chunk it spans.
  void push_runs(OutputEvent::Kind kind, size_t begin, size_t end, bool escape) {
    while (begin < end) {
      size_t stop = begin;
      while (stop < end && pending_chunk[stop] == pending_chunk[begin]) ++stop;
      std::string_view bytes = std::string_view(pending).substr(begin, stop - begin);
      if (escape) {
        std::string escaped;
        append_json_escaped(bytes, escaped);
        push(kind, escaped, pending_chunk[begin], true);
      } else {
        push(kind, bytes, pending_chunk[begin], true);
      }
      begin = stop;
    }
  }

  // Applies `a` to pending[begin, end).
  void emit(const Action& a, size_t begin, size_t end) {
    if (begin >= end) return;
    const std::string_view bytes = std::string_view(pending).substr(begin, end - begin);
    const uint32_t at = pending_chunk[end - 1];  // a label belongs where its marker ends
    const bool space = a.kind == ActionKind::kToSpace;
    if (space && !last_was_space) push(OutputEvent::Kind::kContent, " ", pending_chunk[begin]);
    last_was_space = space;
    const bool in_json = stage.id == StageId::kCommon || stage.id == StageId::kJson;
    switch (a.kind) {
      case ActionKind::kRaw:
        push_runs(OutputEvent::Kind::kContent, begin, end, false);
        break;
      case ActionKind::kReasoning:
        push_runs(OutputEvent::Kind::kReasoning, begin, end, false);
        break;
      case ActionKind::kSkip:
      case ActionKind::kToSpace:
        break;
      case ActionKind::kToolName:
        tool_name.append(bytes);
        break;
      case ActionKind::kToolCallBegin:
        tool_name.clear();
        break;
      case ActionKind::kToolNameEnd:
        out.push_back({OutputEvent::Kind::kToolCall, tool_name});
        out_chunk.push_back(at);
        open_run = false;
        has_tool_calls = true;
        break;
      case ActionKind::kLabel:
        push(in_json ? OutputEvent::Kind::kContent : OutputEvent::Kind::kToolArguments, a.text, at);
        break;
      case ActionKind::kArgsEnd:
        push(OutputEvent::Kind::kToolArguments, a.text, at);
        break;
      case ActionKind::kParamNameStart:
        push(OutputEvent::Kind::kToolArguments, a.text, at);
        push(OutputEvent::Kind::kToolArguments, "\"", at, /*unmatched_text=*/true);
        break;
      case ActionKind::kParamNameEnd:
        push(OutputEvent::Kind::kToolArguments, "\"", at, /*unmatched_text=*/true);
        push(OutputEvent::Kind::kToolArguments, ": ", at);
        break;
      case ActionKind::kRawArgs:
        push_runs(OutputEvent::Kind::kToolArguments, begin, end, false);
        break;
      case ActionKind::kRawArgsString:
        push_runs(OutputEvent::Kind::kToolArguments, begin, end, true);
        break;
      case ActionKind::kStopSequence:
        stop_sequence = std::string(bytes);
        finished = true;
        break;
      case ActionKind::kTaggedCallBegin:
        tagged_call.clear();
        break;
      case ActionKind::kTaggedCallBody:
        tagged_call.append(bytes);
        break;
      case ActionKind::kTaggedCallEnd:
        end_tagged_call(at);
        break;
    }
  }

  // A complete <tool_call> block: {"name": ..., "arguments": {...}} ("parameters" also taken;
  // string arguments are passed as written), or an array of such objects (SmolLM2 writes one),
  // becomes calls; anything else stays text.
  void end_tagged_call(uint32_t at) {
    using Json = nlohmann::ordered_json;
    const Json j = Json::parse(tagged_call, nullptr, /*allow_exceptions=*/false);
    auto is_call = [](const Json& c) {
      return c.is_object() && c.contains("name") && c["name"].is_string();
    };
    const bool ok = is_call(j) || (j.is_array() && !j.empty() &&
                                   std::all_of(j.begin(), j.end(), is_call));
    if (!ok) {
      push(OutputEvent::Kind::kContent,
           std::string(kTaggedCallStart) + tagged_call + kTaggedCallEnd, at);
      open_run = false;
      return;
    }
    for (const Json& call : j.is_array() ? j : Json::array({j})) {
      const char* key = call.contains("arguments") ? "arguments" : "parameters";
      std::string arguments = "{}";
      if (call.contains(key) && call[key].is_string()) {
        arguments = call[key].get<std::string>();
      } else if (call.contains(key) && !call[key].is_null()) {
        arguments = dump_prompt_json(call[key], FloatStyle::kRust);
      }
      out.push_back({OutputEvent::Kind::kToolCall, call["name"].get<std::string>()});
      out_chunk.push_back(at);
      push(OutputEvent::Kind::kToolArguments, arguments, at);
    }
    open_run = false;
    has_tool_calls = true;
  }

  void feed_byte(char c) {
    pending += c;
    pending_chunk.push_back(chunk);
    for (Branch& b : branches) {
      if (!b.matcher.feed(c)) continue;
      const size_t n = std::min(b.matcher.match_length(), pending.size());
      emit(unmatched, 0, pending.size() - n);
      Action action = b.action;
      Stage next = b.next;
      // A marker ends the run of text before it, except the quote that closes a streamed name.
      if (action.kind != ActionKind::kParamNameEnd) open_run = false;
      emit(action, pending.size() - n, pending.size());
      last_was_space = false;  // each stage segment of filler text becomes its own space
      if (next.id == StageId::kFinished) finished = true;
      enter(next);
      return;
    }
  }

  // Releases every pending byte that can no longer be part of a marker.
  void release(bool all) {
    size_t keep = 0;
    if (!all) {
      for (const Branch& b : branches) keep = std::max(keep, b.matcher.partial());
    }
    keep = std::min(keep, pending.size());
    emit(unmatched, 0, pending.size() - keep);
    pending.erase(0, pending.size() - keep);
    pending_chunk.erase(pending_chunk.begin(), pending_chunk.end() - static_cast<ptrdiff_t>(keep));
  }

  // Events of chunks whose bytes are all classified; a chunk with a held-back tail waits.
  std::vector<OutputEvent> take_ready(bool all) {
    if (all || pending_chunk.empty() || out_chunk.empty() ||
        out_chunk.back() < pending_chunk.front()) {
      // Everything is ready (the common case): hand the events over without moving them.
      std::vector<OutputEvent> ready;
      ready.swap(out);
      out_chunk.clear();
      open_run = false;
      return ready;
    }
    size_t n = out.size();
    if (!all && !pending_chunk.empty()) {
      n = 0;
      while (n < out.size() && out_chunk[n] < pending_chunk.front()) ++n;
    }
    std::vector<OutputEvent> ready(
        std::make_move_iterator(out.begin()),
        std::make_move_iterator(out.begin() + static_cast<ptrdiff_t>(n)));
    out.erase(out.begin(), out.begin() + static_cast<ptrdiff_t>(n));
    out_chunk.erase(out_chunk.begin(), out_chunk.begin() + static_cast<ptrdiff_t>(n));
    if (out.empty()) open_run = false;
    return ready;
  }
};

OutputParser::OutputParser(const ParsingOptions& options) : state_(std::make_unique<State>()) {
  state_->options = options;
  Stage first{StageId::kCommon, true};
  if (options.starts_in_tool_calls) {
    first = {StageId::kToolCalls};
  } else if (options.thinking_initial_stage) {
    switch (*options.thinking_initial_stage) {
      case ThinkingInitialStage::kReasoningStart:
        first = {StageId::kReasoning, true};
        break;
      case ThinkingInitialStage::kReasoningContinuation:
        first = {StageId::kReasoning, false};
        break;
      case ThinkingInitialStage::kContentContinuation:
        first = {StageId::kCommon, false};
        break;
    }
  }
  state_->enter(first);
}

OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

std::vector<OutputEvent> OutputParser::feed(std::string_view chunk) {
  State& s = *state_;
  ++s.chunk;
  for (size_t i = 0; i < chunk.size() && !s.stop_sequence;) {
    // A stop sequence ends the output: the rest is not read.
    const size_t plain = s.plain_run(chunk.substr(i));
    if (plain > 0) {
      s.feed_plain(chunk.substr(i, plain));
      i += plain;
    } else {
      s.feed_byte(chunk[i++]);
    }
  }
  if (!s.stop_sequence) s.release(/*all=*/false);
  return s.take_ready(/*all=*/false);
}

std::vector<OutputEvent> OutputParser::finish() {
  State& s = *state_;
  if (!s.stop_sequence) s.release(/*all=*/true);
  if (s.stage.id == StageId::kTaggedCall) {
    // An unclosed <tool_call> is not a call: the model's text is given back.
    s.push(OutputEvent::Kind::kContent, kTaggedCallStart + s.tagged_call, s.chunk);
    s.enter({StageId::kFinished});
  }
  return s.take_ready(/*all=*/true);
}

bool OutputParser::has_tool_calls() const { return state_->has_tool_calls; }
const std::optional<std::string>& OutputParser::stop_sequence() const {
  return state_->stop_sequence;
}
bool OutputParser::finished() const { return state_->finished; }

void accumulate(const std::vector<OutputEvent>& events, ParsedOutput& out) {
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEvent::Kind::kContent:
        out.content += e.text;
        break;
      case OutputEvent::Kind::kReasoning:
        out.reasoning += e.text;
        break;
      case OutputEvent::Kind::kToolCall:
        out.tool_calls.push_back({e.text, ""});
        break;
      case OutputEvent::Kind::kToolArguments:
        if (!out.tool_calls.empty()) out.tool_calls.back().arguments += e.text;
        break;
    }
  }
}

}  // namespace deepinfer::recipe
