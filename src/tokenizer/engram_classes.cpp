#include "tokenizer/engram_classes.h"

#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "tokenizer/hf_components.h"

namespace deepinfer {

namespace {

// The normaliser as Hugging Face's tokenizers spells it; the private-use sentinel keeps a text
// that is one space through Strip.
const HfNormalizer& engram_normalizer() {
  static const HfNormalizer normalizer = [] {
    const nlohmann::json spec = nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"Regex": "[ \\t\\r\\n]+"}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": "^ $"}, "content": "\uE000"},
        {"type": "Strip", "strip_left": true, "strip_right": true},
        {"type": "Replace", "pattern": {"String": "\uE000"}, "content": " "}]})");
    auto parsed = HfNormalizer::parse(spec, "engram classes", "normalizer");
    DI_ICHECK(parsed.ok());
    return std::move(parsed).value();
  }();
  return normalizer;
}

}  // namespace

std::vector<int32_t> engram_token_classes(const Tokenizer& tokenizer, int64_t* n_classes) {
  const HfNormalizer& normalizer = engram_normalizer();
  std::unordered_map<std::string, int32_t> class_of;
  std::vector<int32_t> classes(static_cast<size_t>(tokenizer.n_vocab()));
  for (int32_t id = 0; id < static_cast<int32_t>(classes.size()); ++id) {
    // decode() renders control tokens as nothing; Hugging Face's decode with
    // skip_special_tokens=False gives their text.
    const std::string text = tokenizer.is_control(id) ? tokenizer.token_text(id) : tokenizer.decode({&id, 1});
    std::string key;
    if (text.find("\xEF\xBF\xBD") != std::string::npos) {
      key = tokenizer.token_text(id);
    } else {
      key = normalizer.apply(text);
      if (key.empty()) key = text;
    }
    const auto [it, added] = class_of.try_emplace(std::move(key), static_cast<int32_t>(class_of.size()));
    classes[static_cast<size_t>(id)] = it->second;
  }
  *n_classes = static_cast<int64_t>(class_of.size());
  return classes;
}

}  // namespace deepinfer
