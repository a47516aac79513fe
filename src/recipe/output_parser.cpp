#include "recipe/output_parser.h"

#include <algorithm>
#include <array>
#include <iterator>
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
  void reset() { matched_ = newlines_ = fed_ = 0; }

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

// The branches of one stage, built the first time the stage is entered and kept: a DSML call
// enters a dozen stages, which must not build matchers each time.
struct StageTable {
  bool built = false;
  std::vector<Branch> branches;
  Action unmatched;
  std::array<bool, 256> start_bytes{};  // bytes that can begin a match of some branch
};
constexpr size_t kNumStageTables = (static_cast<size_t>(StageId::kFinished) + 1) * 2;
size_t table_index(Stage s) { return static_cast<size_t>(s.id) * 2 + (s.flag ? 1 : 0); }

// Pending bytes [previous run's end, end) came in fed chunk `chunk`. Chunks are appended in
// order, so a few runs describe the pending text (one per chunk a held-back marker spans).
struct ChunkRun {
  size_t end;
  uint32_t chunk;
};

// Bytes being classified, with the fed chunk of each: the pending text, or a run of a chunk
// that no marker can touch, classified in place without being copied.
struct Source {
  std::string_view text;
  const ChunkRun* runs;
  size_t n_runs;

  uint32_t chunk_at(size_t i) const {
    for (size_t k = 0; k < n_runs; ++k) {
      if (i < runs[k].end) return runs[k].chunk;
    }
    return runs[n_runs - 1].chunk;
  }
};

// In JSON mode, where the top-level value stands: a brace or bracket count outside strings.
enum class JsonScan { kOff, kAwaitValue, kInValue, kDone };

// Text buffers of handed-over events larger than this are freed rather than reused.
constexpr size_t kMaxSpareCapacity = 4096;
constexpr size_t kMaxSpares = 64;
constexpr size_t kSpareReserve = 128;
// Events one call returns that fit without growing the vectors (a chunk of a few tokens makes
// a handful).
constexpr size_t kReservedEvents = 32;
// A text that fits in the string itself has no buffer worth keeping.
const size_t kInlineCapacity = std::string().capacity();

constexpr const char* kDsmlStart = "<｜DSML｜";
constexpr const char* kDsmlClose = "</｜DSML｜";
constexpr const char* kTaggedCallStart = "<tool_call>";
constexpr const char* kTaggedCallEnd = "</tool_call>";

}  // namespace

struct OutputParser::State {
  ParsingOptions options;
  Stage stage;
  std::array<StageTable, kNumStageTables> tables;
  StageTable* table = nullptr;           // the current stage's
  std::string pending;                   // bytes of this stage not yet classified
  std::vector<ChunkRun> pending_runs;    // the fed chunk of each pending byte
  uint32_t chunk = 0;                    // number of feed() calls so far
  std::string tool_name;
  std::string tagged_call;  // the JSON of a <tool_call> block so far
  bool has_tool_calls = false;
  bool finished = false;
  bool last_was_space = false;      // ToSpace runs become one space
  bool open_run = false;            // out.back() is unmatched text that may still grow
  std::vector<OutputEvent> out;     // events not handed over yet
  std::vector<uint32_t> out_chunk;  // the chunk each event of `out` belongs to
  std::vector<OutputEvent> ready;   // what the last feed() / finish() returned
  std::vector<std::string> spare;   // text buffers of handed-over events, for new events
  std::optional<std::string> stop_sequence;
  JsonScan json_scan = JsonScan::kOff;
  int64_t json_depth = 0;
  bool json_in_string = false;
  bool json_escaped = false;

  void build(StageTable& t, Stage s) {
    auto add = [&](MatcherKind k, std::string pattern, Stage next, Action a) {
      t.branches.push_back({Matcher(k, std::move(pattern)), next, std::move(a)});
    };
    auto stops = [&] {
      for (const std::string& seq : options.stop_sequences) {
        if (!seq.empty())
          add(MatcherKind::kString, seq, {StageId::kFinished}, {ActionKind::kStopSequence});
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
          t.unmatched = {ActionKind::kToSpace};
          break;
        }
        stops();
        tool_start();
        if (s.flag) add(MatcherKind::kLeadingNewline, "", s, {ActionKind::kSkip});
        // A stray end of thinking in the answer is dropped.
        add(MatcherKind::kString, "</think>", {StageId::kCommon, false}, {ActionKind::kSkip});
        t.unmatched = {ActionKind::kRaw};
        break;
      case StageId::kJson:
        stops();
        add(MatcherKind::kString, "\n```", {StageId::kMatchedJson}, {ActionKind::kSkip});
        t.unmatched = {ActionKind::kRaw};
        break;
      case StageId::kMatchedJson:
        tool_start();
        t.unmatched = {ActionKind::kToSpace};
        break;
      case StageId::kToolCalls:
        add(MatcherKind::kString, "invoke name=\"", {StageId::kToolName},
            {ActionKind::kToolCallBegin});
        add(MatcherKind::kString, std::string(kDsmlClose) + "tool_calls>", {StageId::kFinished},
            {ActionKind::kSkip});
        add(MatcherKind::kString, std::string(kDsmlClose) + " calls>", {StageId::kFinished},
            {ActionKind::kSkip});
        t.unmatched = {ActionKind::kSkip};
        break;
      case StageId::kToolName:
        add(MatcherKind::kString, "\"", {StageId::kArgs, true}, {ActionKind::kToolNameEnd});
        t.unmatched = {ActionKind::kToolName};
        break;
      case StageId::kArgs:
        add(MatcherKind::kString, "parameter name=\"", {StageId::kParamName},
            {ActionKind::kParamNameStart, s.flag ? "{" : ", "});
        add(MatcherKind::kString, kDsmlClose, {StageId::kToolCalls},
            {ActionKind::kArgsEnd, s.flag ? "{}" : "}"});
        t.unmatched = {ActionKind::kSkip};
        break;
      case StageId::kParamName:
        // The quoted name (not escaped) streams as one run with its quotes, as in the reference.
        add(MatcherKind::kString, "\"", {StageId::kParamType}, {ActionKind::kParamNameEnd});
        t.unmatched = {ActionKind::kRawArgs};
        break;
      case StageId::kParamType:
        add(MatcherKind::kString, "true\">", {StageId::kParamValue, true},
            {ActionKind::kLabel, "\""});
        add(MatcherKind::kString, "false\">", {StageId::kParamValue, false}, {ActionKind::kSkip});
        t.unmatched = {ActionKind::kSkip};
        break;
      case StageId::kParamValue:
        add(MatcherKind::kString, kDsmlClose, {StageId::kArgs, false},
            s.flag ? Action{ActionKind::kLabel, "\""} : Action{ActionKind::kSkip});
        t.unmatched = {s.flag ? ActionKind::kRawArgsString : ActionKind::kRawArgs};
        break;
      case StageId::kReasoning:
        tool_start();
        if (s.flag) add(MatcherKind::kLeadingNewline, "", s, {ActionKind::kSkip});
        add(MatcherKind::kNewlinesAndString, "</think>", {StageId::kCommon, true},
            {ActionKind::kSkip});
        t.unmatched = {ActionKind::kReasoning};
        break;
      case StageId::kTaggedCall:
        // The block is read whole: a model may write "arguments" before "name".
        add(MatcherKind::kString, kTaggedCallEnd, {StageId::kCommon, true},
            {ActionKind::kTaggedCallEnd});
        t.unmatched = {ActionKind::kTaggedCallBody};
        break;
      case StageId::kFinished:
        t.unmatched = {ActionKind::kSkip};
        break;
    }
    for (const Branch& b : t.branches) b.matcher.add_start_bytes(t.start_bytes);
    t.built = true;
  }

  void enter(Stage s) {
    stage = s;
    pending.clear();
    pending_runs.clear();
    table = &tables[table_index(s)];
    if (!table->built) build(*table, s);
    for (Branch& b : table->branches) b.matcher.reset();
  }

  // Length of the run at text[from...] that no branch can match any byte of: such bytes are
  // classified as they stand, which is most of the output (the byte-by-byte matching is the
  // slow part).
  size_t plain_run(std::string_view text, size_t from) const {
    for (const Branch& b : table->branches) {
      if (!b.matcher.idle()) return 0;
    }
    const std::array<bool, 256>& starts = table->start_bytes;
    size_t n = from;
    while (n < text.size() && !starts[static_cast<unsigned char>(text[n])]) ++n;
    return n - from;
  }

  Source pending_source() const { return {pending, pending_runs.data(), pending_runs.size()}; }

  void append_pending(char c) {
    pending += c;
    if (pending_runs.empty() || pending_runs.back().chunk != chunk) {
      pending_runs.push_back({pending.size(), chunk});
    } else {
      pending_runs.back().end = pending.size();
    }
  }

  // Drops the first `n` pending bytes (classified).
  void drop_pending(size_t n) {
    if (n == 0) return;
    pending.erase(0, n);
    size_t gone = 0;
    while (gone < pending_runs.size() && pending_runs[gone].end <= n) ++gone;
    pending_runs.erase(pending_runs.begin(), pending_runs.begin() + static_cast<ptrdiff_t>(gone));
    for (ChunkRun& r : pending_runs) r.end -= n;
  }

  // In JSON mode, follows the top-level value through `bytes` of the JSON stage; the output is
  // finished when it closes. Brackets of either kind count alike: a model's mismatched bracket
  // still ends the value it opened.
  void scan_json(std::string_view bytes) {
    for (char c : bytes) {
      if (json_scan == JsonScan::kAwaitValue) {
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c != '{' && c != '[') {
          json_scan = JsonScan::kOff;  // a scalar: its end cannot be seen while streaming
          return;
        }
        json_scan = JsonScan::kInValue;
        json_depth = 1;
        continue;
      }
      if (json_scan != JsonScan::kInValue) return;
      if (json_in_string) {
        if (json_escaped) {
          json_escaped = false;
        } else if (c == '\\') {
          json_escaped = true;
        } else if (c == '"') {
          json_in_string = false;
        }
        continue;
      }
      if (c == '"') {
        json_in_string = true;
      } else if (c == '{' || c == '[') {
        ++json_depth;
      } else if ((c == '}' || c == ']') && --json_depth == 0) {
        json_scan = JsonScan::kDone;
        finished = true;
        return;
      }
    }
  }
  bool scanning_json() const {
    return stage.id == StageId::kJson &&
           (json_scan == JsonScan::kAwaitValue || json_scan == JsonScan::kInValue);
  }

  // A new event's text buffer: one of a handed-over event, so that steady streaming does not
  // allocate. A fresh one is made roomy enough for most events, so that the pool settles after
  // a few chunks instead of regrowing its buffers one by one.
  std::string take_spare() {
    if (spare.empty()) {
      std::string s;
      s.reserve(kSpareReserve);
      return s;
    }
    std::string s = std::move(spare.back());
    spare.pop_back();
    s.clear();
    return s;
  }
  // The events handed over by the last call are no longer the caller's: keep their buffers.
  void recycle_ready() {
    for (OutputEvent& e : ready) {
      const size_t cap = e.text.capacity();
      if (cap > kInlineCapacity && cap <= kMaxSpareCapacity && spare.size() < kMaxSpares)
        spare.push_back(std::move(e.text));
    }
    ready.clear();
  }

  // Events follow the reference's deltas: one per run of one action within one fed chunk, or
  // one per marker label. A run of unmatched text grows (open_run) until something else is
  // emitted. `escape`: the text goes in as a JSON string's inside.
  void push(OutputEvent::Kind kind, std::string_view text, uint32_t in_chunk,
            bool unmatched_text = false, bool escape = false) {
    if (text.empty()) return;
    std::string* dest;
    if (unmatched_text && open_run && !out.empty() && out.back().kind == kind &&
        out_chunk.back() == in_chunk) {
      dest = &out.back().text;
    } else {
      out.push_back({kind, take_spare()});
      out_chunk.push_back(in_chunk);
      dest = &out.back().text;
    }
    if (escape) {
      append_json_escaped(text, *dest);
    } else {
      dest->append(text);
    }
    open_run = unmatched_text;
  }

  // Text of src[begin, end), one push per fed chunk it spans.
  void push_runs(OutputEvent::Kind kind, const Source& src, size_t begin, size_t end,
                 bool escape) {
    size_t k = 0;
    while (begin < end) {
      while (src.runs[k].end <= begin) ++k;
      const size_t stop = std::min(end, src.runs[k].end);
      push(kind, src.text.substr(begin, stop - begin), src.runs[k].chunk, true, escape);
      begin = stop;
    }
  }

  // Applies `a` to src[begin, end).
  void emit(const Action& a, const Source& src, size_t begin, size_t end) {
    if (begin >= end) return;
    const std::string_view bytes = src.text.substr(begin, end - begin);
    const uint32_t at = src.chunk_at(end - 1);  // a label belongs where its marker ends
    const bool space = a.kind == ActionKind::kToSpace;
    if (space && !last_was_space) push(OutputEvent::Kind::kContent, " ", src.chunk_at(begin));
    last_was_space = space;
    const bool in_json = stage.id == StageId::kCommon || stage.id == StageId::kJson;
    switch (a.kind) {
      case ActionKind::kRaw:
        push_runs(OutputEvent::Kind::kContent, src, begin, end, false);
        break;
      case ActionKind::kReasoning:
        push_runs(OutputEvent::Kind::kReasoning, src, begin, end, false);
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
        out.push_back({OutputEvent::Kind::kToolCall, take_spare()});
        out.back().text.assign(tool_name);
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
        push_runs(OutputEvent::Kind::kToolArguments, src, begin, end, false);
        break;
      case ActionKind::kRawArgsString:
        push_runs(OutputEvent::Kind::kToolArguments, src, begin, end, true);
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

  // A byte that some branch may match.
  void feed_byte(char c) {
    if (scanning_json()) scan_json(std::string_view(&c, 1));
    append_pending(c);
    for (Branch& b : table->branches) {
      if (!b.matcher.feed(c)) continue;
      const size_t n = std::min(b.matcher.match_length(), pending.size());
      const Source src = pending_source();
      emit(table->unmatched, src, 0, pending.size() - n);
      // The tables are never rebuilt, so the action outlives enter().
      const Action& action = b.action;
      const Stage next = b.next;
      // A marker ends the run of text before it, except the quote that closes a streamed name.
      if (action.kind != ActionKind::kParamNameEnd) open_run = false;
      emit(action, src, pending.size() - n, pending.size());
      last_was_space = false;  // each stage segment of filler text becomes its own space
      if (next.id == StageId::kFinished) finished = true;
      if (next.id == StageId::kJson && stage.id != StageId::kJson) {
        // "{" or "[" opened the value; after a fence it is still to come.
        json_scan = action.kind == ActionKind::kLabel ? JsonScan::kInValue : JsonScan::kAwaitValue;
        json_depth = json_scan == JsonScan::kInValue ? 1 : 0;
        json_in_string = json_escaped = false;
      }
      enter(next);
      return;
    }
  }

  // Bytes no branch can touch (every matcher idle, none a start byte): whatever is pending can
  // no longer be part of a marker either, so both are classified now, the run in place.
  void feed_plain(std::string_view bytes) {
    if (!pending.empty()) {
      emit(table->unmatched, pending_source(), 0, pending.size());
      drop_pending(pending.size());
    }
    if (scanning_json()) scan_json(bytes);
    const ChunkRun run{bytes.size(), chunk};
    emit(table->unmatched, Source{bytes, &run, 1}, 0, bytes.size());
    for (Branch& b : table->branches) b.matcher.skip(bytes.size());
  }

  // Releases every pending byte that can no longer be part of a marker.
  void release(bool all) {
    size_t keep = 0;
    if (!all) {
      for (const Branch& b : table->branches) keep = std::max(keep, b.matcher.partial());
    }
    keep = std::min(keep, pending.size());
    emit(table->unmatched, pending_source(), 0, pending.size() - keep);
    drop_pending(pending.size() - keep);
  }

  // The common case while streaming, a chunk of answer or reasoning text with nothing held
  // back and no byte that could start a marker: one event, in the buffer of the last one.
  // Returns false (having done nothing) for any other chunk. The general path gives the same.
  bool feed_only_text(std::string_view bytes) {
    const ActionKind action = table->unmatched.kind;
    if (bytes.empty() || !pending.empty() || !out.empty() || stop_sequence ||
        (action != ActionKind::kRaw && action != ActionKind::kReasoning) ||
        plain_run(bytes, 0) != bytes.size()) {
      return false;
    }
    if (scanning_json()) scan_json(bytes);
    for (Branch& b : table->branches) b.matcher.skip(bytes.size());
    last_was_space = false;
    open_run = false;
    const auto kind =
        action == ActionKind::kRaw ? OutputEvent::Kind::kContent : OutputEvent::Kind::kReasoning;
    if (ready.size() != 1) {
      recycle_ready();
      ready.push_back({kind, take_spare()});
    }
    ready[0].kind = kind;
    ready[0].text.assign(bytes);
    return true;
  }

  // Moves the events of chunks whose bytes are all classified to `ready`; a chunk with a
  // held-back tail waits.
  void take_ready(bool all) {
    if (all || pending.empty() || out_chunk.empty() ||
        out_chunk.back() < pending_runs.front().chunk) {
      // Everything is ready (the common case): the buffers trade places, nothing is copied.
      ready.swap(out);
      out_chunk.clear();
      open_run = false;
      return;
    }
    size_t n = 0;
    while (n < out.size() && out_chunk[n] < pending_runs.front().chunk) ++n;
    std::move(out.begin(), out.begin() + static_cast<ptrdiff_t>(n), std::back_inserter(ready));
    out.erase(out.begin(), out.begin() + static_cast<ptrdiff_t>(n));
    out_chunk.erase(out_chunk.begin(), out_chunk.begin() + static_cast<ptrdiff_t>(n));
    if (out.empty()) open_run = false;
  }
};

OutputParser::OutputParser(const ParsingOptions& options) : state_(std::make_unique<State>()) {
  state_->options = options;
  // `out` and `ready` trade buffers at every call, so each would otherwise grow on its own.
  state_->out.reserve(kReservedEvents);
  state_->out_chunk.reserve(kReservedEvents);
  state_->ready.reserve(kReservedEvents);
  state_->spare.reserve(kMaxSpares);
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

const std::vector<OutputEvent>& OutputParser::feed(std::string_view chunk) {
  State& s = *state_;
  ++s.chunk;
  if (s.feed_only_text(chunk)) return s.ready;
  s.recycle_ready();
  for (size_t i = 0; i < chunk.size() && !s.stop_sequence;) {
    // A stop sequence ends the output: the rest is not read.
    const size_t plain = s.plain_run(chunk, i);
    if (plain > 0) {
      s.feed_plain(chunk.substr(i, plain));
      i += plain;
    } else {
      s.feed_byte(chunk[i++]);
    }
  }
  if (!s.stop_sequence) s.release(/*all=*/false);
  s.take_ready(/*all=*/false);
  return s.ready;
}

const std::vector<OutputEvent>& OutputParser::finish() {
  State& s = *state_;
  s.recycle_ready();
  if (!s.stop_sequence) s.release(/*all=*/true);
  if (s.stage.id == StageId::kTaggedCall) {
    // An unclosed <tool_call> is not a call: the model's text is given back.
    s.push(OutputEvent::Kind::kContent, kTaggedCallStart + s.tagged_call, s.chunk);
    s.enter({StageId::kFinished});
  }
  s.take_ready(/*all=*/true);
  return s.ready;
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
