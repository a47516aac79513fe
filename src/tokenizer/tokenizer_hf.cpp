// Tokenizer's factories for Hugging Face files (tokenizer.json, tokenizer_config.json).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json_util.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace deepinfer {

namespace {

using nlohmann::json;

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return data_loss(path + ": read failed");
  return text.str();
}

// "bos_token": "<s>" or {"content": "<s>", ...} (the AddedToken form); empty when absent.
Result<std::string> token_content(const json& config, const char* key, const std::string& where) {
  const json* v = hf_json::member(config, key);
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return hf_json::get_string(*v, "content", where, key);
  return invalid_argument(where + ": " + key + " must be a string or an object with \"content\"");
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_tokenizer_json(const std::string& path) {
  DI_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  tok->kind_ = Kind::kHuggingFace;
  auto vocab = std::make_unique<Vocab>();
  DI_ASSIGN_OR_RETURN(tok->hf_, HfPipeline::parse(text, path, vocab.get()));
  tok->unknown_id_ = vocab->unknown_id;
  const HfDecoder& decoder = tok->hf_->decoder();
  tok->leading_strip_char_ = decoder.leading_strip_char();
  tok->leading_strip_count_ = decoder.leading_strip_count();
  // What decode shows: special tokens render as nothing (Hugging Face's skip_special_tokens),
  // every other token as the decoder spells it.
  tok->pieces_.assign(vocab->texts.size(), std::string());
  std::vector<bool> special(vocab->texts.size(), false);
  for (const HfAddedToken& token : tok->hf_->added_tokens()) special[token.id] = token.special;
  for (size_t id = 0; id < vocab->texts.size(); ++id) {
    if (special[id] || vocab->types[id] == TokenType::kUnused) continue;
    tok->pieces_[id] = decoder.piece(vocab->texts[id]);
  }
  // The post-processor's first token is the sequence start when there is one.
  if (tok->hf_->has_post_template() && !tok->hf_->prefix_ids().empty()) {
    tok->bos_id_ = tok->hf_->prefix_ids().front();
    tok->add_bos_ = true;
  }
  tok->add_end_of_turn_tokens(*vocab);
  tok->specials_ = std::make_unique<SpecialTokenMatcher>(*vocab, 0);
  tok->vocab_ = std::move(vocab);
  tok->init_parallel_safety();
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_dir(const std::string& dir) {
  const std::filesystem::path root(dir);
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, from_tokenizer_json((root / "tokenizer.json").string()));
  const std::string config_path = (root / "tokenizer_config.json").string();
  if (std::filesystem::exists(config_path)) {
    DI_ASSIGN_OR_RETURN(const std::string text, read_text_file(config_path));
    const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) return invalid_argument(config_path + ": not a JSON object");
    DI_ASSIGN_OR_RETURN(const std::string bos, token_content(config, "bos_token", config_path));
    DI_ASSIGN_OR_RETURN(const std::string eos, token_content(config, "eos_token", config_path));
    if (!bos.empty()) {
      const int32_t id = tok->vocab_->find(bos);
      if (id < 0) return invalid_argument(config_path + ": bos_token '" + bos + "' is not in the vocabulary");
      tok->bos_id_ = id;
    }
    if (!eos.empty()) {
      const int32_t id = tok->vocab_->find(eos);
      if (id < 0) return invalid_argument(config_path + ": eos_token '" + eos + "' is not in the vocabulary");
      tok->eos_id_ = id;
      tok->end_of_generation_.insert(id);
    }
    DI_ASSIGN_OR_RETURN(tok->add_bos_, hf_json::get_bool_or(config, "add_bos_token", tok->add_bos_, config_path, "tokenizer_config"));
    if (const json* tmpl = hf_json::member(config, "chat_template"); tmpl != nullptr) {
      if (tmpl->is_string()) {
        tok->chat_template_ = tmpl->get<std::string>();
      } else if (tmpl->is_array()) {
        // [{"name": "default", "template": "..."}, ...]: the default one.
        for (const json& entry : *tmpl) {
          const json* name = hf_json::member(entry, "name");
          const json* body = hf_json::member(entry, "template");
          if (name != nullptr && body != nullptr && name->is_string() && body->is_string() &&
              name->get<std::string>() == "default") {
            tok->chat_template_ = body->get<std::string>();
          }
        }
      } else {
        return invalid_argument(config_path + ": chat_template must be a string or a list of named templates");
      }
    }
  }
  const std::string jinja_path = (root / "chat_template.jinja").string();
  if (tok->chat_template_.empty() && std::filesystem::exists(jinja_path)) {
    DI_ASSIGN_OR_RETURN(tok->chat_template_, read_text_file(jinja_path));
  }
  return tok;
}

}  // namespace deepinfer
