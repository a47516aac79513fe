#include "server/api_prompt.h"

#include <algorithm>

#include "model/loader/tensor_source.h"
#include "recipe/dsv4_encoding.h"
#include "server/forced_call.h"

namespace deepinfer::server {

namespace {

bool has_strict_tool_under_auto(const recipe::Conversation& conversation) {
  return conversation.tool_choice == recipe::ToolChoice::kAuto &&
         std::any_of(conversation.tools.begin(), conversation.tools.end(),
                     [](const recipe::ToolDefinition& t) { return t.strict.value_or(false); });
}

}  // namespace

recipe::ModelVersion deepseek_version_of(std::string_view architecture) {
  return architecture == "deepseek_v4" ? recipe::ModelVersion::kDeepseekV4Pro : recipe::ModelVersion::kDeepseekV41Flash;
}

Result<std::string> model_architecture(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, open_tensor_source(path));
  return source->metadata().get_string("general.architecture");
}

Result<std::unique_ptr<PromptBuilder>> PromptBuilder::create(std::shared_ptr<const Tokenizer> tokenizer,
                                                             std::string_view architecture) {
  const recipe::ModelVersion version = deepseek_version_of(architecture);
  if (tokenizer->find_token(recipe::kUserToken).has_value()) {
    return std::unique_ptr<PromptBuilder>(new PromptBuilder(std::move(tokenizer), true, version, std::nullopt));
  }
  if (tokenizer->chat_template().empty()) {
    return std::unique_ptr<PromptBuilder>(new PromptBuilder(std::move(tokenizer), false, version, std::nullopt));
  }
  auto tmpl = recipe::ChatTemplate::parse(tokenizer->chat_template());
  if (!tmpl.ok()) return invalid_argument("the model's chat template: " + tmpl.status().message());
  return std::unique_ptr<PromptBuilder>(
      new PromptBuilder(std::move(tokenizer), false, version, std::move(tmpl).value()));
}

Result<BuiltPrompt> PromptBuilder::build(const recipe::ConversationRequest& request) const {
  return is_deepseek() ? build_deepseek(request) : build_template(request);
}

Result<std::vector<int32_t>> deepseek_prompt_ids(const Tokenizer& tokenizer,
                                                 const std::vector<recipe::PromptPiece>& pieces) {
  std::vector<Segment> segments;
  segments.reserve(pieces.size());
  for (const recipe::PromptPiece& piece : pieces) {
    if (!piece.special) {
      segments.push_back(Segment::of_text(piece.text));
      continue;
    }
    if (std::optional<int32_t> id = tokenizer.find_token(piece.text)) {
      segments.push_back(Segment::of_token(*id));
      continue;
    }
    // A marker the vocabulary has no single token for (V4's "<｜System｜>" in some releases):
    // it is still the encoder's text, so it is tokenized as trusted, specials parsed.
    for (int32_t id : tokenizer.encode(piece.text, {.add_bos = false, .parse_special = true})) {
      segments.push_back(Segment::of_token(id));
    }
  }
  return tokenizer.encode_segments(segments, {.add_bos = false});
}

Result<std::vector<recipe::TemplatePiece>> render_template_pieces(const recipe::ChatTemplate& chat_template,
                                                                  const Tokenizer& tokenizer,
                                                                  recipe::Conversation conversation) {
  conversation.thinking_mode = false;
  recipe::ChatTemplateInput input = recipe::template_input(conversation, /*add_generation_prompt=*/true);
  if (tokenizer.bos_id() >= 0) input.bos_token = tokenizer.token_text(tokenizer.bos_id());
  if (tokenizer.eos_id() >= 0) input.eos_token = tokenizer.token_text(tokenizer.eos_id());
  input.extra["enable_thinking"] = false;
  auto pieces = chat_template.render_pieces(input);
  if (!pieces.ok()) return invalid_argument("chat template: " + pieces.status().message());
  return pieces;
}

std::vector<int32_t> template_prompt_ids(const Tokenizer& tokenizer, const std::vector<recipe::TemplatePiece>& pieces) {
  // Template text may spell control tokens; text that came from the request never does.
  // Pieces are tokenized one by one: a piece boundary is where a marker or a line break meets
  // user text, which the pre-tokenizers split anyway.
  std::vector<int32_t> ids;
  for (const recipe::TemplatePiece& piece : pieces) {
    EncodeOptions options;
    options.parse_special = piece.trusted;
    const std::vector<int32_t> piece_ids = tokenizer.encode(piece.text, options);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
  }
  return ids;
}

Result<BuiltPrompt> PromptBuilder::build_deepseek(const recipe::ConversationRequest& request) const {
  const recipe::RenderedPrompt rendered =
      recipe::render_prompt(request.conversation, recipe::prompt_encoding(request.model_version));
  BuiltPrompt out;
  DI_ASSIGN_OR_RETURN(out.ids, deepseek_prompt_ids(*tokenizer_, rendered.pieces));
  out.ends_in_tool_calls = rendered.ends_in_tool_calls;
  // tool_choice required (or one named function): the recipe's prefill opens the DSML block and
  // a grammar writes the calls, so the model can only call the tools, with valid arguments.
  const recipe::Conversation& conversation = request.conversation;
  DsmlCallOptions options;
  options.one_call = request.inference_options.disable_parallel_tool_use;
  if (rendered.ends_in_tool_calls && !conversation.tools.empty()) {
    DI_ASSIGN_OR_RETURN(out.constraint,
                        forced_dsml_call(conversation.tools, recipe::prompt_encoding(request.model_version), options));
  } else if (request.inference_options.must_call_tool && !conversation.tools.empty()) {
    // tool_choice "any": the prompt is Auto's; the answer is the block, from its opening on
    // (after the reasoning when thinking is on).
    options.opens_block = true;
    DI_ASSIGN_OR_RETURN(out.constraint,
                        forced_dsml_call(conversation.tools, recipe::prompt_encoding(request.model_version), options));
    if (conversation.thinking_mode) out.constraint.start_after = recipe::kThinkEndToken;
  } else if (has_strict_tool_under_auto(conversation)) {
    // strict tools under auto: the model may answer in text, but a call it opens is written
    // under the grammar (non-strict tools' calls stay free).
    options.opened_by_model = true;
    options.strict_only = true;
    DI_ASSIGN_OR_RETURN(out.constraint,
                        forced_dsml_call(conversation.tools, recipe::prompt_encoding(request.model_version), options));
    out.constraint_yields = true;
  }
  return out;
}

Result<BuiltPrompt> PromptBuilder::build_template(const recipe::ConversationRequest& request) const {
  if (!chat_template_) {
    return invalid_argument(
        "this model has no chat template (tokenizer.chat_template), so it cannot answer conversations; send a "
        "plain prompt to /v1/completions instead");
  }
  DI_ASSIGN_OR_RETURN(std::vector<recipe::TemplatePiece> pieces,
                      render_template_pieces(*chat_template_, *tokenizer_, request.conversation));
  BuiltPrompt out;
  out.ids = template_prompt_ids(*tokenizer_, pieces);
  const recipe::Conversation& conversation = request.conversation;
  // tool_choice required (or one named function): the prompt opens the call and a grammar
  // writes the rest, so the model can only write one, with valid arguments. Few templates offer
  // a prefill of their own; the tagged-JSON form is what the output parser reads for these models.
  // tool_choice "any" (Anthropic) is a forced call here too: the template's prompt is ours.
  const bool forced = conversation.tool_choice == recipe::ToolChoice::kRequired || request.inference_options.must_call_tool;
  if (forced && !conversation.tools.empty()) {
    DI_ASSIGN_OR_RETURN(ForcedCall call, forced_tagged_call(conversation.tools));
    out.output_prefix = std::move(call.opening);
    out.output_closing = std::move(call.closing);
    out.constraint = std::move(call.constraint);
    const std::vector<int32_t> ids = tokenizer_->encode(out.output_prefix, EncodeOptions{});
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  } else if (has_strict_tool_under_auto(conversation)) {
    DI_ASSIGN_OR_RETURN(out.constraint, strict_tagged_calls(conversation.tools));
    out.constraint_yields = true;
  }
  return out;
}

void PromptBuilder::adjust_parsing(const BuiltPrompt& prompt, recipe::ConversationRequest& request) const {
  recipe::ParsingOptions& parsing = request.parsing_options;
  if (prompt.ends_in_tool_calls) parsing.starts_in_tool_calls = true;
  if (!is_deepseek()) {
    parsing.thinking_initial_stage = std::nullopt;
    parsing.tool_call_format = recipe::ToolCallFormat::kTaggedJson;
  }
  // Stop strings are the engine's: it ends the sequence (and frees its KV) at the match.
  parsing.stop_sequences.clear();
}

}  // namespace deepinfer::server
