// GET /v1/info: what is served and how the engine was configured, for the web UI's dashboard
// and for operators. Needs the API key like every /v1 path; holds no path of the machine beyond
// the model's file name.
#include <filesystem>

#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

namespace {

const char* prompt_format(const PromptBuilder& prompts) {
  if (prompts.is_deepseek()) {
    return prompts.model_version() == recipe::ModelVersion::kDeepseekV4Pro ? "DeepSeek V4" : "DeepSeek V4.1";
  }
  return prompts.chat_template() != nullptr ? "chat template" : "none (plain completions only)";
}

Json engine_json(const EngineConfig& c) {
  Json e;
  e["model_file"] = std::filesystem::path(c.model_path).filename().string();
  e["backend"] = c.backend;
  e["threads"] = c.threads;
  e["block_size"] = c.block_size;
  e["kv_cache_tokens"] = c.kv_cache_tokens;
  e["kv_cache_memory_bytes"] = c.kv_cache_memory_bytes;
  e["kv_cache_dtype"] = c.kv_cache_dtype == KvCacheDtype::kF16 ? "f16" : "f32";
  e["max_num_batched_tokens"] = c.max_num_batched_tokens;
  e["max_num_seqs"] = c.max_num_seqs;
  e["prefix_caching"] = c.enable_prefix_caching;
  e["batch_invariant"] = c.batch_invariant;
  e["async_scheduling"] = c.async_scheduling;
  e["swa_replay"] = c.swa_replay;
  e["kv_store"] = !c.kv_store_dir.empty() || c.kv_store_memory_bytes > 0;
  Json spec;
  spec["method"] = speculative_method_name(c.speculative.method);
  spec["num_tokens"] = c.speculative.num_tokens;
  spec["schedule"] = c.speculative.schedule == SpeculativeSchedule::kFixed ? "fixed" : "confidence";
  if (!c.speculative.draft_model_path.empty()) {
    spec["draft_model_file"] = std::filesystem::path(c.speculative.draft_model_path).filename().string();
  }
  e["speculative"] = std::move(spec);
  return e;
}

}  // namespace

void ApiServer::info(const HttpRequest&, ResponseWriter& out) {
  const EngineStats stats = engine_.stats();
  Json reply;
  reply["model"] = config_.served_model_name;
  reply["prompt_format"] = prompt_format(*prompts_);
  reply["max_model_len"] = engine_.max_context();
  reply["n_vocab"] = engine_.n_vocab();
  reply["max_queue"] = config_.max_queue;
  reply["engine"] = engine_json(config_.engine);
  Json kv;
  kv["blocks_total"] = stats.kv_blocks_total;
  kv["block_size"] = stats.kv_block_size;
  kv["bytes"] = stats.kv_cache_bytes;
  kv["groups"] = Json::array();
  for (const KvGroupUsage& g : stats.kv_groups) {
    kv["groups"].push_back({{"name", g.name}, {"blocks_total", g.blocks_total}, {"bytes", g.bytes}});
  }
  reply["kv_cache"] = std::move(kv);
  send_json(out, 200, reply.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace deepinfer::server
