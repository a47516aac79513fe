#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <atomic>

#include "core/log.h"

namespace deepinfer {

namespace {

// GPT-2's pattern: English contractions, letter runs, digit runs and other-symbol runs, each
// with at most one leading space; whitespace runs keep their last space for the next word.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3: case-insensitive contractions, digits in groups of up to three, newlines kept apart.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 2: as Llama 3 with single digits.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek V3 and V4 (tokenizer.json's Sequence of Splits, applied in turn): digits in groups
// of up to three, runs of CJK ideographs and kana, then words, punctuation and newlines.
constexpr const char* kDeepseekDigits = R"(\p{N}{1,3})";
constexpr const char* kDeepseekCjk = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr const char* kDeepseekWords =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

Result<std::vector<std::string>> pre_tokenizer_patterns(std::string_view pre) {
  if (pre == "gpt2" || pre == "default" || pre == "mpt" || pre == "olmo" || pre == "jais") {
    return std::vector<std::string>{kGpt2Pattern};
  }
  // StarCoder's family (SmolLM among it) puts every digit in a piece of its own first.
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell" ||
      pre == "command-r" || pre == "exaone" || pre == "minerva") {
    return std::vector<std::string>{R"(\p{N})", kGpt2Pattern};
  }
  if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3" || pre == "smaug-bpe" || pre == "dbrx") {
    return std::vector<std::string>{kLlama3Pattern};
  }
  if (pre == "qwen2" || pre == "stablelm2") return std::vector<std::string>{kQwen2Pattern};
  // "joyai-llm" is what antirez/ds4's DeepSeek V4 GGUF files name it.
  if (pre == "deepseek-v3" || pre == "deepseek-v4" || pre == "joyai-llm") {
    return std::vector<std::string>{kDeepseekDigits, kDeepseekCjk, kDeepseekWords};
  }
  return not_found("unknown pre-tokenizer '" + std::string(pre) + "'");
}

struct RegexSplitter::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

Result<RegexSplitter> RegexSplitter::create(const std::vector<std::string>& patterns) {
  RegexSplitter splitter;
  for (const std::string& text : patterns) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    // UCP makes \s, \d and \w Unicode-aware as well as \p{..}; MATCH_INVALID_UTF lets a subject
    // with invalid UTF-8 be searched (its bad bytes simply never match) instead of failing.
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                     &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return invalid_argument("pre-tokenizer pattern '" + text + "' does not compile at offset " +
                              std::to_string(error_offset) + ": " + reinterpret_cast<char*>(message));
    }
    // JIT is an optimization only: where it is unavailable the interpreter gives the same matches.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto pattern = std::make_unique<Pattern>();
    pattern->code = code;
    splitter.patterns_.push_back(std::move(pattern));
  }
  return splitter;
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (size_t i = 0; i < patterns_.size(); ++i) {
    next.clear();
    for (std::string_view piece : current) split_one(*patterns_[i], piece, &next);
    current.swap(next);
  }
  pieces->insert(pieces->end(), current.begin(), current.end());
}

void RegexSplitter::split_one(const Pattern& pattern, std::string_view text,
                              std::vector<std::string_view>* pieces) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(pattern.code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0;  // start of the unmatched text before the next match
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = pcre2_match(pattern.code, subject, text.size(), offset, 0, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // Resource limits (a pathological input): keep the rest as one piece rather than fail;
      // the text still round-trips, only its split differs.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) DI_LOG(kWarn, "pre-tokenizer regex failed (error " + std::to_string(rc) + "); rest of the text kept whole");
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {  // an empty match splits nothing; search again one byte further
      offset = begin + 1;
      continue;
    }
    if (begin > gap_start) pieces->push_back(text.substr(gap_start, begin - gap_start));
    pieces->push_back(text.substr(begin, end - begin));
    gap_start = offset = end;
  }
  if (gap_start < text.size()) pieces->push_back(text.substr(gap_start));
  pcre2_match_data_free(match);
}

}  // namespace deepinfer
