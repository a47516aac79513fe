#include "tokenizer/hf_components.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/hf_json_util.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Shared helpers

// A compiled PCRE2 pattern; matching allocates its own match data, so one object serves many
// threads.
class Pcre2Regex {
 public:
  static Result<std::shared_ptr<Pcre2Regex>> compile(const std::string& pattern, const std::string& context) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return invalid_argument(context + ": regex '" + pattern + "' does not compile at offset " +
                              std::to_string(error_offset) + ": " + reinterpret_cast<char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto regex = std::make_shared<Pcre2Regex>();
    regex->code_ = code;
    return regex;
  }
  ~Pcre2Regex() { pcre2_code_free(code_); }

  // Appends the [begin, end) ranges of the non-empty, non-overlapping matches in text.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), offset, 0, match, nullptr);
      if (rc < 0) break;  // no match, or a resource limit: the rest stays unmatched
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      if (ovector[1] == ovector[0]) {
        // Empty match: step over one whole character so offsets stay on character boundaries.
        const size_t n = utf8::valid_length(text, ovector[0]);
        offset = ovector[0] + (n == 0 ? 1 : n);
        continue;
      }
      out->emplace_back(ovector[0], ovector[1]);
      offset = ovector[1];
    }
    pcre2_match_data_free(match);
  }

 private:
  pcre2_code* code_ = nullptr;
};

namespace {

// Decodes the code point at text[pos] (valid UTF-8), advancing pos.
int32_t next_code_point(std::string_view text, size_t* pos) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + *pos),
                                  static_cast<utf8proc_ssize_t>(text.size() - *pos), &cp);
  if (n <= 0) {
    *pos += 1;
    return 0xFFFD;
  }
  *pos += static_cast<size_t>(n);
  return cp;
}

// Rust's char::is_whitespace (the White_Space property), which Hugging Face uses.
bool is_white_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_punctuation(int32_t cp) {
  if (cp < 0x80) return std::ispunct(cp) != 0;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}


// A "pattern" field: {"String": s} or {"Regex": r}.
struct PatternSpec {
  std::string literal;
  std::shared_ptr<Pcre2Regex> regex;
};

Result<PatternSpec> parse_pattern(const json& step, const std::string& where, const std::string& field) {
  const json* pattern = hf_json::member(step, "pattern");
  if (pattern == nullptr || !pattern->is_object()) {
    return invalid_argument(where + ": " + field + ".pattern is missing or not an object");
  }
  PatternSpec spec;
  if (const json* s = hf_json::member(*pattern, "String"); s != nullptr && s->is_string()) {
    spec.literal = s->get<std::string>();
    return spec;
  }
  if (const json* r = hf_json::member(*pattern, "Regex"); r != nullptr && r->is_string()) {
    DI_ASSIGN_OR_RETURN(spec.regex, Pcre2Regex::compile(r->get<std::string>(), where + ": " + field + ".pattern"));
    return spec;
  }
  return invalid_argument(where + ": " + field + ".pattern must hold \"String\" or \"Regex\"");
}

void find_pattern(const PatternSpec& spec, std::string_view text, std::vector<std::pair<size_t, size_t>>* out) {
  if (spec.regex) {
    spec.regex->find_all(text, out);
    return;
  }
  if (spec.literal.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(spec.literal, pos)) != std::string_view::npos) {
    out->emplace_back(pos, pos + spec.literal.size());
    pos += spec.literal.size();
  }
}

std::string replace_pattern(const PatternSpec& spec, std::string_view text, std::string_view content) {
  if (!spec.regex) return utf8::replace_all(text, spec.literal, content);
  std::vector<std::pair<size_t, size_t>> hits;
  spec.regex->find_all(text, &hits);
  std::string out;
  size_t pos = 0;
  for (auto [b, e] : hits) {
    out.append(text.substr(pos, b - pos));
    out.append(content);
    pos = e;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Normalizer

struct HfNormalizer::Step {
  enum class Kind { kUnicode, kLowercase, kReplace, kPrepend, kStrip, kStripAccents };
  Kind kind;
  int unicode_options = 0;  // utf8proc options for kUnicode
  PatternSpec pattern;      // kReplace
  std::string content;      // kReplace replacement, kPrepend prefix
  bool strip_left = false;
  bool strip_right = false;
};

HfNormalizer::HfNormalizer() = default;
HfNormalizer::HfNormalizer(HfNormalizer&&) noexcept = default;
HfNormalizer& HfNormalizer::operator=(HfNormalizer&&) noexcept = default;
HfNormalizer::~HfNormalizer() = default;

Result<HfNormalizer> HfNormalizer::parse(const json& json_value, const std::string& where, const std::string& field) {
  HfNormalizer normalizer;
  if (!json_value.is_null()) DI_RETURN_IF_ERROR(normalizer.parse_into(json_value, where, field));
  return normalizer;
}

Status HfNormalizer::parse_into(const json& j, const std::string& where, const std::string& field) {
  DI_ASSIGN_OR_RETURN(const std::string type, hf_json::get_type(j, where, field));
  Step step;
  if (type == "Sequence") {
    const json* list = hf_json::member(j, "normalizers");
    if (list == nullptr || !list->is_array()) return invalid_argument(where + ": " + field + ".normalizers must be a list");
    for (size_t i = 0; i < list->size(); ++i) {
      DI_RETURN_IF_ERROR(parse_into((*list)[i], where, field + ".normalizers[" + std::to_string(i) + "]"));
    }
    return Status::ok_status();
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = Step::Kind::kUnicode;
    const bool compose = type == "NFC" || type == "NFKC";
    const bool compat = type == "NFKC" || type == "NFKD";
    step.unicode_options = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) | (compat ? UTF8PROC_COMPAT : 0);
  } else if (type == "Lowercase") {
    step.kind = Step::Kind::kLowercase;
  } else if (type == "StripAccents") {
    step.kind = Step::Kind::kStripAccents;
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    DI_ASSIGN_OR_RETURN(step.pattern, parse_pattern(j, where, field));
    DI_ASSIGN_OR_RETURN(step.content, hf_json::get_string(j, "content", where, field));
  } else if (type == "Prepend") {
    step.kind = Step::Kind::kPrepend;
    DI_ASSIGN_OR_RETURN(step.content, hf_json::get_string(j, "prepend", where, field));
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    DI_ASSIGN_OR_RETURN(step.strip_left, hf_json::get_bool_or(j, "strip_left", true, where, field));
    DI_ASSIGN_OR_RETURN(step.strip_right, hf_json::get_bool_or(j, "strip_right", true, where, field));
  } else {
    return unimplemented(where + ": " + field + ".type '" + type + "' is not a supported normalizer");
  }
  steps_.push_back(std::move(step));
  return Status::ok_status();
}

std::string HfNormalizer::apply(std::string_view input, bool* dropped_start) const {
  std::string text(input);
  bool dropped = false;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kUnicode: {
        utf8proc_uint8_t* mapped = nullptr;
        const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                    static_cast<utf8proc_option_t>(step.unicode_options));
        if (n >= 0) text.assign(reinterpret_cast<char*>(mapped), static_cast<size_t>(n));
        std::free(mapped);
        break;
      }
      case Step::Kind::kLowercase: {
        std::string out;
        out.reserve(text.size());
        size_t pos = 0;
        while (pos < text.size()) {
          const int32_t cp = next_code_point(text, &pos);
          if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping
            out += "i\xCC\x87";
            continue;
          }
          utf8::append_code_point(static_cast<uint32_t>(utf8proc_tolower(cp)), &out);
        }
        text = std::move(out);
        break;
      }
      case Step::Kind::kStripAccents: {
        // Every mark (general category Mn, Mc, Me), as Hugging Face's is_combining_mark.
        std::string out;
        out.reserve(text.size());
        size_t pos = 0;
        while (pos < text.size()) {
          const bool first = pos == 0;
          const int32_t cp = next_code_point(text, &pos);
          const utf8proc_category_t cat = utf8proc_category(cp);
          if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) {
            dropped = dropped || first;
            continue;
          }
          utf8::append_code_point(static_cast<uint32_t>(cp), &out);
        }
        text = std::move(out);
        break;
      }
      case Step::Kind::kReplace: {
        if (step.content.empty() && !text.empty()) {
          std::vector<std::pair<size_t, size_t>> hits;
          find_pattern(step.pattern, text, &hits);
          dropped = dropped || (!hits.empty() && hits.front().first == 0);
        }
        text = replace_pattern(step.pattern, text, step.content);
        break;
      }
      case Step::Kind::kPrepend:
        if (!text.empty()) text.insert(0, step.content);
        break;
      case Step::Kind::kStrip: {
        size_t begin = 0;
        size_t end = text.size();
        if (step.strip_left) {
          while (begin < end) {
            size_t pos = begin;
            if (!is_white_space(next_code_point(text, &pos))) break;
            begin = pos;
          }
        }
        if (step.strip_right) {
          while (end > begin) {
            size_t start = end - 1;
            while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
            size_t pos = start;
            if (!is_white_space(next_code_point(text, &pos))) break;
            end = start;
          }
        }
        dropped = dropped || begin > 0;
        text = text.substr(begin, end - begin);
        break;
      }
    }
  }
  if (dropped_start != nullptr) *dropped_start = dropped;
  return text;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer

namespace {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Result<SplitBehavior> parse_behavior(const json& j, const char* key, SplitBehavior fallback, const std::string& where,
                                     const std::string& field) {
  const json* v = hf_json::member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return invalid_argument(where + ": " + field + "." + key + " must be a string");
  const std::string s = v->get<std::string>();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument(where + ": " + field + "." + key + " '" + s + "' is not a split behaviour");
}

struct Range {
  size_t begin;
  size_t end;
  bool is_match;
};

// Hugging Face's SplitDelimiterBehavior applied to the ranges (which cover the text in order).
std::vector<Range> apply_behavior(const std::vector<Range>& ranges, SplitBehavior behavior) {
  std::vector<Range> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return ranges;
    case SplitBehavior::kRemoved:
      for (const Range& r : ranges) {
        if (!r.is_match) out.push_back(r);
      }
      return out;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Range& r : ranges) {
        if (r.is_match && !previous_match && !out.empty()) {
          out.back().end = r.end;
        } else {
          out.push_back({r.begin, r.end, false});
        }
        previous_match = r.is_match;
      }
      return out;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    }
    case SplitBehavior::kContiguous: {
      int previous = -1;
      for (const Range& r : ranges) {
        if (previous == static_cast<int>(r.is_match) && !out.empty()) {
          out.back().end = r.end;
        } else {
          out.push_back({r.begin, r.end, false});
        }
        previous = static_cast<int>(r.is_match);
      }
      return out;
    }
  }
  return out;
}

// Matches -> ranges covering all of text (gaps as non-matches), optionally inverted.
std::vector<Range> to_ranges(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                             bool invert) {
  std::vector<Range> ranges;
  size_t pos = 0;
  for (auto [b, e] : matches) {
    if (b > pos) ranges.push_back({pos, b, invert});
    ranges.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < text.size()) ranges.push_back({pos, text.size(), invert});
  return ranges;
}

// Character-class matches: every character for which pred holds, one match each.
template <typename Pred>
void find_chars(std::string_view text, Pred pred, std::vector<std::pair<size_t, size_t>>* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = pos;
    if (pred(next_code_point(text, &pos))) out->emplace_back(begin, pos);
  }
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

struct HfPreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kWhitespaceSplit, kPunctuation };
  Kind kind;
  PatternSpec pattern;  // kSplit (Digits and Whitespace become regex splits)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace
  int prepend_scheme = 0;         // kMetaspace: 0 always, 1 first, 2 never
  bool metaspace_split = true;
};

HfPreTokenizer::HfPreTokenizer() = default;
HfPreTokenizer::HfPreTokenizer(HfPreTokenizer&&) noexcept = default;
HfPreTokenizer& HfPreTokenizer::operator=(HfPreTokenizer&&) noexcept = default;
HfPreTokenizer::~HfPreTokenizer() = default;

Result<HfPreTokenizer> HfPreTokenizer::parse(const json& j, const std::string& where, const std::string& field) {
  HfPreTokenizer pre;
  if (!j.is_null()) DI_RETURN_IF_ERROR(pre.parse_into(j, where, field));
  return pre;
}

Status HfPreTokenizer::parse_into(const json& j, const std::string& where, const std::string& field) {
  DI_ASSIGN_OR_RETURN(const std::string type, hf_json::get_type(j, where, field));
  Step step;
  if (type == "Sequence") {
    const json* list = hf_json::member(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return invalid_argument(where + ": " + field + ".pretokenizers must be a list");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      DI_RETURN_IF_ERROR(parse_into((*list)[i], where, field + ".pretokenizers[" + std::to_string(i) + "]"));
    }
    return Status::ok_status();
  }
  if (type == "Split") {
    step.kind = Step::Kind::kSplit;
    DI_ASSIGN_OR_RETURN(step.pattern, parse_pattern(j, where, field));
    DI_ASSIGN_OR_RETURN(step.behavior, parse_behavior(j, "behavior", SplitBehavior::kIsolated, where, field));
    DI_ASSIGN_OR_RETURN(step.invert, hf_json::get_bool_or(j, "invert", false, where, field));
  } else if (type == "ByteLevel") {
    DI_ASSIGN_OR_RETURN(step.add_prefix_space, hf_json::get_bool_or(j, "add_prefix_space", true, where, field));
    DI_ASSIGN_OR_RETURN(const bool use_regex, hf_json::get_bool_or(j, "use_regex", true, where, field));
    byte_level_ = true;
    if (step.add_prefix_space) {
      position_independent_ = false;
      Step prefix;
      prefix.kind = Step::Kind::kByteLevel;
      prefix.add_prefix_space = true;
      steps_.push_back(std::move(prefix));
    }
    if (!use_regex) return Status::ok_status();
    step.kind = Step::Kind::kSplit;
    DI_ASSIGN_OR_RETURN(step.pattern.regex, Pcre2Regex::compile(kGpt2Pattern, where + ": " + field));
  } else if (type == "Digits") {
    step.kind = Step::Kind::kSplit;
    DI_ASSIGN_OR_RETURN(const bool individual, hf_json::get_bool_or(j, "individual_digits", false, where, field));
    DI_ASSIGN_OR_RETURN(step.pattern.regex,
                        Pcre2Regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)", where + ": " + field));
  } else if (type == "Whitespace") {
    // Keep word runs and symbol runs, drop the whitespace between them.
    step.kind = Step::Kind::kSplit;
    step.behavior = SplitBehavior::kRemoved;
    step.invert = true;
    // Rust's \w (Alphabetic, marks, decimal digits, connectors, joiners): PCRE2's \w lacks marks.
    DI_ASSIGN_OR_RETURN(step.pattern.regex,
                        Pcre2Regex::compile(R"([\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
                                            R"([^\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)",
                                            where + ": " + field));
  } else if (type == "WhitespaceSplit") {
    step.kind = Step::Kind::kWhitespaceSplit;
  } else if (type == "Punctuation") {
    step.kind = Step::Kind::kPunctuation;
    DI_ASSIGN_OR_RETURN(step.behavior, parse_behavior(j, "behavior", SplitBehavior::kIsolated, where, field));
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    position_independent_ = false;
    DI_ASSIGN_OR_RETURN(step.replacement, hf_json::get_string(j, "replacement", where, field));
    DI_ASSIGN_OR_RETURN(step.metaspace_split, hf_json::get_bool_or(j, "split", true, where, field));
    if (const json* scheme = hf_json::member(j, "prepend_scheme"); scheme != nullptr) {
      const std::string s = scheme->is_string() ? scheme->get<std::string>() : "";
      if (s == "always") step.prepend_scheme = 0;
      else if (s == "first") step.prepend_scheme = 1;
      else if (s == "never") step.prepend_scheme = 2;
      else return invalid_argument(where + ": " + field + ".prepend_scheme must be \"always\", \"first\" or \"never\"");
    } else {
      DI_ASSIGN_OR_RETURN(const bool add_prefix, hf_json::get_bool_or(j, "add_prefix_space", true, where, field));
      step.prepend_scheme = add_prefix ? 0 : 2;
    }
  } else {
    return unimplemented(where + ": " + field + ".type '" + type + "' is not a supported pre-tokenizer");
  }
  steps_.push_back(std::move(step));
  return Status::ok_status();
}

void HfPreTokenizer::split(PreToken input, Arena* arena, std::vector<PreToken>* out) const {
  if (input.text.empty()) return;
  std::vector<PreToken> current{input};
  std::vector<PreToken> next;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    next.clear();
    for (const PreToken& piece : current) {
      std::string_view text = piece.text;
      if (step.kind == Step::Kind::kByteLevel) {
        if (text.front() != ' ') {
          arena->push_back(" " + std::string(text));
          next.push_back({arena->back(), piece.at_start});
        } else {
          next.push_back(piece);
        }
        continue;
      }
      SplitBehavior behavior = step.behavior;
      bool invert = step.invert;
      matches.clear();
      if (step.kind == Step::Kind::kMetaspace) {
        std::string rewritten = utf8::replace_all(text, " ", step.replacement);
        const bool starts = rewritten.compare(0, step.replacement.size(), step.replacement) == 0;
        if (!starts && (step.prepend_scheme == 0 || (step.prepend_scheme == 1 && piece.at_start))) {
          rewritten.insert(0, step.replacement);
        }
        arena->push_back(std::move(rewritten));
        text = arena->back();
        if (!step.metaspace_split) {
          next.push_back({text, piece.at_start});
          continue;
        }
        PatternSpec literal;
        literal.literal = step.replacement;
        find_pattern(literal, text, &matches);
        behavior = SplitBehavior::kMergedWithNext;
        invert = false;
      } else if (step.kind == Step::Kind::kWhitespaceSplit) {
        find_chars(text, is_white_space, &matches);
        behavior = SplitBehavior::kRemoved;
      } else if (step.kind == Step::Kind::kPunctuation) {
        find_chars(text, is_punctuation, &matches);
      } else {
        find_pattern(step.pattern, text, &matches);
      }
      bool first = true;
      for (const Range& r : apply_behavior(to_ranges(text, matches, invert), behavior)) {
        if (r.end > r.begin) next.push_back({text.substr(r.begin, r.end - r.begin), piece.at_start && first && r.begin == 0});
        first = false;
      }
    }
    current.swap(next);
  }
  out->insert(out->end(), current.begin(), current.end());
}

// ---------------------------------------------------------------------------------------------
// Decoder

struct HfDecoder::Step {
  enum class Kind { kByteLevel, kReplace, kByteFallback, kStrip, kMetaspace };
  Kind kind;
  PatternSpec pattern;  // kReplace
  std::string content;  // kReplace replacement; kStrip the character; kMetaspace the replacement
  int strip_start = 0;
  int strip_stop = 0;
};

HfDecoder::HfDecoder() = default;
HfDecoder::HfDecoder(HfDecoder&&) noexcept = default;
HfDecoder& HfDecoder::operator=(HfDecoder&&) noexcept = default;
HfDecoder::~HfDecoder() = default;

Result<HfDecoder> HfDecoder::parse(const json& j, const std::string& where, const std::string& field) {
  HfDecoder decoder;
  if (j.is_null()) {
    // Without a decoder Hugging Face joins the tokens with spaces: each token brings a space
    // and the first one's is dropped.
    decoder.join_with_spaces_ = true;
    decoder.leading_strip_char_ = ' ';
    decoder.leading_strip_count_ = 1;
    return decoder;
  }
  DI_RETURN_IF_ERROR(decoder.parse_into(j, where, field));
  return decoder;
}

Status HfDecoder::parse_into(const json& j, const std::string& where, const std::string& field) {
  DI_ASSIGN_OR_RETURN(const std::string type, hf_json::get_type(j, where, field));
  Step step;
  if (type == "Sequence") {
    const json* list = hf_json::member(j, "decoders");
    if (list == nullptr || !list->is_array()) return invalid_argument(where + ": " + field + ".decoders must be a list");
    for (size_t i = 0; i < list->size(); ++i) {
      DI_RETURN_IF_ERROR(parse_into((*list)[i], where, field + ".decoders[" + std::to_string(i) + "]"));
    }
    return Status::ok_status();
  }
  if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
    fused_ = true;  // it joins the tokens' bytes
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    fused_ = true;
    return Status::ok_status();
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    DI_ASSIGN_OR_RETURN(step.pattern, parse_pattern(j, where, field));
    DI_ASSIGN_OR_RETURN(step.content, hf_json::get_string(j, "content", where, field));
  } else if (type == "Strip") {
    DI_ASSIGN_OR_RETURN(const std::string content, hf_json::get_string(j, "content", where, field));
    DI_ASSIGN_OR_RETURN(const int64_t start, hf_json::get_int_or(j, "start", 0, where, field));
    DI_ASSIGN_OR_RETURN(const int64_t stop, hf_json::get_int_or(j, "stop", 0, where, field));
    if (content.size() != 1) return unimplemented(where + ": " + field + ".content: only a one-byte Strip character is supported");
    if (fused_) {
      // After the tokens are joined only the start of the whole text can be trimmed while
      // streaming; a trailing trim is not applied.
      leading_strip_char_ = content[0];
      leading_strip_count_ = static_cast<int>(start);
      return Status::ok_status();
    }
    step.kind = Step::Kind::kStrip;
    step.content = content;
    step.strip_start = static_cast<int>(start);
    step.strip_stop = static_cast<int>(stop);
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    DI_ASSIGN_OR_RETURN(step.content, hf_json::get_string(j, "replacement", where, field));
    std::string scheme = "always";
    if (const json* s = hf_json::member(j, "prepend_scheme"); s != nullptr && s->is_string()) {
      scheme = s->get<std::string>();
    } else {
      DI_ASSIGN_OR_RETURN(const bool add_prefix, hf_json::get_bool_or(j, "add_prefix_space", true, where, field));
      if (!add_prefix) scheme = "never";
    }
    // The first token loses the space its prefix stood for.
    if (scheme != "never") {
      leading_strip_char_ = ' ';
      leading_strip_count_ = 1;
    }
  } else {
    return unimplemented(where + ": " + field + ".type '" + type + "' is not a supported decoder");
  }
  steps_.push_back(std::move(step));
  return Status::ok_status();
}

std::string HfDecoder::piece(std::string_view token) const {
  if (join_with_spaces_) return " " + std::string(token);
  std::string text(token);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kByteLevel:
        text = byte_level::decode_whole(text);
        break;
      case Step::Kind::kReplace:
        text = replace_pattern(step.pattern, text, step.content);
        break;
      case Step::Kind::kMetaspace:
        text = utf8::replace_all(text, step.content, " ");
        break;
      case Step::Kind::kByteFallback:
        if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
          char* end = nullptr;
          const std::string hex = text.substr(3, 2);
          const long value = std::strtol(hex.c_str(), &end, 16);
          if (end == hex.c_str() + 2) text = std::string(1, static_cast<char>(value));
        }
        break;
      case Step::Kind::kStrip: {
        const char c = step.content[0];
        size_t begin = 0;
        size_t end = text.size();
        for (int i = 0; i < step.strip_start && begin < end && text[begin] == c; ++i) ++begin;
        for (int i = 0; i < step.strip_stop && end > begin && text[end - 1] == c; ++i) --end;
        text = text.substr(begin, end - begin);
        break;
      }
    }
  }
  return text;
}

}  // namespace deepinfer
