#include "cli/engine_flags.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/backend.h"

#include "model/catalog.h"

namespace deepinfer::cli {

namespace {

// An integer flag in [lo, hi]; the error names the flag and the range.
Status read_int(const Args& args, const std::string& flag, int64_t lo, int64_t hi, int64_t* value) {
  DI_ASSIGN_OR_RETURN(*value, args.get_int(flag, *value));
  if (*value < lo || *value > hi) {
    return invalid_argument(flag + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                            ", got " + std::to_string(*value));
  }
  return {};
}

const char* dtype_name(KvCacheDtype dtype) { return dtype == KvCacheDtype::kF32 ? "f32" : "f16"; }

// "512M", "8G", "1T" (powers of 1024: K, M, G, T, optionally followed by "iB" or "B") or bytes.
Status read_bytes(const Args& args, const std::string& flag, int64_t* value) {
  const auto text = args.get(flag);
  if (!text) return {};
  auto bytes = parse_byte_size(*text);
  if (!bytes.ok()) return invalid_argument(flag + ": " + bytes.status().message());
  *value = *bytes;
  return {};
}

}  // namespace

namespace {

// "'<text>' <what>" (appended, not concatenated from a literal: GCC 12 misreads the latter).
Status bad_value(std::string_view text, std::string_view what) {
  std::string m(1, '\'');
  m.append(text);
  m.append("' ");
  m.append(what);
  return invalid_argument(m);
}

}  // namespace

Result<int64_t> parse_byte_size(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string_view unit = text.substr(digits);
  if (digits == 0 || digits > 15) return bad_value(text, "is not a size such as 512M or 8G");
  int shift = 0;
  if (!unit.empty()) {
    const std::string_view units = "KMGT";
    const size_t at = units.find(static_cast<char>(unit[0] & ~0x20));
    const std::string_view rest = unit.substr(1);
    if (at == std::string_view::npos || !(rest.empty() || rest == "B" || rest == "iB")) {
      return bad_value(text, "is not a size such as 512M or 8G");
    }
    shift = 10 * static_cast<int>(at + 1);
  }
  int64_t n = 0;
  for (size_t i = 0; i < digits; ++i) n = n * 10 + (text[i] - '0');
  if (shift > 0 && n > (INT64_MAX >> shift)) return bad_value(text, "is too large");
  return n << shift;
}

Result<int64_t> parse_duration_seconds(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view unit = text.substr(digits);
  int64_t scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  else if (unit == "m") scale = 60;
  else if (unit == "h") scale = 3600;
  else if (unit == "d") scale = 86400;
  if (digits == 0 || digits > 12 || scale == 0) {
    return bad_value(text, "is not a duration such as 90s, 30m, 72h or 3d");
  }
  int64_t n = 0;
  for (size_t i = 0; i < digits; ++i) n = n * 10 + (text[i] - '0');
  return n * scale;
}

namespace {

Status read_kv_store_flags(const Args& args, EngineConfig& config) {
  if (auto dir = args.get("--kv-store")) {
    if (dir->empty()) return invalid_argument("--kv-store needs a directory");
    config.kv_store_dir = *dir;
  }
  DI_RETURN_IF_ERROR(read_bytes(args, "--kv-store-memory", &config.kv_store_memory_bytes));
  DI_RETURN_IF_ERROR(read_bytes(args, "--kv-store-capacity", &config.kv_store_capacity_bytes));
  if (auto ttl = args.get("--kv-store-ttl")) {
    auto seconds = parse_duration_seconds(*ttl);
    if (!seconds.ok()) return invalid_argument("--kv-store-ttl: " + seconds.status().message());
    config.kv_store_ttl_seconds = *seconds;
  }
  return read_int(args, "--kv-store-page-tokens", 1, 1 << 16, &config.kv_store_page_tokens);
}

Result<SpeculativeMethod> parse_speculative_method(const std::string& name) {
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "suffix") return SpeculativeMethod::kSuffix;
  if (name == "draft") return SpeculativeMethod::kDraft;
  if (name == "mtp") return SpeculativeMethod::kMtp;
  if (name == "dspark") return SpeculativeMethod::kDspark;
  if (name == "none") return SpeculativeMethod::kNone;
  return invalid_argument("--speculative-method must be ngram, suffix, draft, mtp, dspark or none, got '" + name + "'");
}

Status read_speculative_flags(const Args& args, EngineConfig& config) {
  if (auto method = args.get("--speculative-method")) {
    DI_ASSIGN_OR_RETURN(config.speculative.method, parse_speculative_method(*method));
  }
  if (auto draft = args.get("--draft-model")) {
    auto path = resolve_model_path(*draft);
    if (!path.ok()) return invalid_argument("--draft-model: " + path.status().message());
    config.speculative.draft_model_path = *path;
    // A draft model alone asks for drafting with it.
    if (!args.get("--speculative-method")) config.speculative.method = SpeculativeMethod::kDraft;
  }
  if (config.speculative.method == SpeculativeMethod::kDraft && config.speculative.draft_model_path.empty()) {
    return invalid_argument("--speculative-method draft needs --draft-model PATH (a model with the target's tokenizer)");
  }
  int64_t n = config.speculative.num_tokens;
  DI_RETURN_IF_ERROR(read_int(args, "--num-speculative-tokens", 1, kMaxSpeculativeTokens, &n));
  config.speculative.num_tokens = static_cast<int32_t>(n);
  if (auto schedule = args.get("--speculative-schedule")) {
    if (*schedule == "fixed") {
      config.speculative.schedule = SpeculativeSchedule::kFixed;
    } else if (*schedule == "confidence") {
      config.speculative.schedule = SpeculativeSchedule::kConfidence;
    } else {
      return invalid_argument("--speculative-schedule must be fixed or confidence, got '" + *schedule + "'");
    }
  }
  if (config.speculative.method != SpeculativeMethod::kNone && config.batch_invariant) {
    return invalid_argument("--speculative-method and --batch-invariant are mutually exclusive: how many draft tokens "
                            "a step verifies depends on the load");
  }
  return Status::ok_status();
}

}  // namespace

void add_engine_flags(FlagSpec& spec) {
  spec.with_value.insert({"--model", "--backend", "--threads", "--kv-cache-dtype", "--kv-cache-tokens", "--kv-cache-memory",
                          "--block-size",
                          "--max-num-seqs", "--max-num-batched-tokens", "--kv-store", "--kv-store-memory",
                          "--kv-store-capacity", "--kv-store-ttl", "--kv-store-page-tokens", "--speculative-method",
                          "--num-speculative-tokens", "--speculative-schedule", "--draft-model"});
  spec.switches.insert({"--no-prefix-caching", "--batch-invariant", "--no-async-scheduling", "--no-swa-replay",
                        "--no-grammar-fast-forward", "--no-overlap-masks"});
  spec.aliases.insert({{"-m", "--model"}, {"-t", "--threads"}, {"--ctx", "--kv-cache-tokens"}});
}

std::string engine_flags_usage(const EngineConfig& d) {
  char text[4096];
  std::snprintf(text, sizeof text, R"(engine options (the same in every command that runs a model):
  -m, --model MODEL          GGUF file, Hugging Face directory or known name (default: %s)
  --backend B                where the model runs: cpu, or cpu-reference (the scalar reference
                             kernels every backend is tested against; slow) (default %s)
  -t, --threads N            CPU threads, 0: all cores (default %d)
  --kv-cache-dtype T         KV cache elements: f16 (half the memory) or f32 (exact) (default %s)
  --kv-cache-tokens N        KV capacity in tokens, shared by the running sequences; one request's
                             context is at most this and the model's (--ctx N is the same; default
                             %lld: 16 full contexts or what --kv-cache-memory holds, the smaller)
  --kv-cache-memory BYTES    the KV memory the default capacity fills, e.g. 4G (default %s); the
                             pools as allocated: windowed layers cost their windows only
  --block-size N             tokens per KV block (default %d)
  --max-num-seqs N           sequences decoded together (default %d)
  --max-num-batched-tokens N tokens per engine step (default %lld)
  --no-prefix-caching        turn the prefix cache off
  --batch-invariant          outputs do not depend on the batch (with a seed: reproducible)
  --no-async-scheduling      do the engine's bookkeeping between steps, not during them
  --no-overlap-masks         structured output's masks are computed when sampling, not while
                             the forward pass runs (the overlap needs async scheduling)
  --no-swa-replay            sliding-window models (Gemma 3) take no prefix hit: cold recompute
  --no-grammar-fast-forward  structured output samples forced text token by token (default:
                             drafted and verified in one pass)
  --kv-store DIR             keep computed KV pages in DIR (a local disk or a shared filesystem),
                             for restarts and other processes (docs/kv-store.md)
  --kv-store-memory BYTES    the store's memory tier, e.g. 2G (default 0: none)
  --kv-store-capacity BYTES  DIR's high watermark; least recently used pages go (default 0: none)
  --kv-store-ttl DURATION    a page lives this long after its last use, e.g. 72h, 3d, 0: forever
                             (default %s)
  --kv-store-page-tokens N   tokens per page, a multiple of --block-size (default %lld)
  --speculative-method M     speculative decoding: ngram (prompt lookup), suffix (suffix tries
                             over the request and earlier outputs), draft (--draft-model's
                             greedy tokens), mtp (DeepSeek V4's MTP layer) or dspark (DeepSeek
                             V4.1's DSpark layers); lossless (default none)
  --draft-model MODEL        a smaller model with the target's tokenizer that drafts on its own KV
                             cache (implies --speculative-method draft)
  --num-speculative-tokens N draft tokens verified per step at most, 1-15 (default %d)
  --speculative-schedule S   confidence: verify what pays at the current load (DSpark's
                             scheduler); fixed: every draft token (default %s)
)",
                std::string(kDefaultModelName).c_str(), d.backend.c_str(), d.threads, dtype_name(d.kv_cache_dtype),
                static_cast<long long>(d.kv_cache_tokens), (std::to_string(d.kv_cache_memory_bytes >> 20) + "M").c_str(),
                d.block_size, d.max_num_seqs,
                static_cast<long long>(d.max_num_batched_tokens),
                (std::to_string(d.kv_store_ttl_seconds / 3600) + "h").c_str(),
                static_cast<long long>(d.kv_store_page_tokens), d.speculative.num_tokens,
                d.speculative.schedule == SpeculativeSchedule::kFixed ? "fixed" : "confidence");
  return text;
}

Result<EngineConfig> parse_engine_flags(const Args& args, EngineConfig config) {
  int64_t threads = config.threads, block_size = config.block_size, max_num_seqs = config.max_num_seqs;
  DI_RETURN_IF_ERROR(read_int(args, "--threads", 0, 1024, &threads));
  DI_RETURN_IF_ERROR(read_int(args, "--kv-cache-tokens", 0, int64_t{1} << 40, &config.kv_cache_tokens));
  DI_RETURN_IF_ERROR(read_bytes(args, "--kv-cache-memory", &config.kv_cache_memory_bytes));
  if (config.kv_cache_memory_bytes <= 0) return invalid_argument("--kv-cache-memory must be more than 0 bytes");
  DI_RETURN_IF_ERROR(read_int(args, "--block-size", 1, 1024, &block_size));
  DI_RETURN_IF_ERROR(read_int(args, "--max-num-seqs", 1, 4096, &max_num_seqs));
  DI_RETURN_IF_ERROR(read_int(args, "--max-num-batched-tokens", 1, int64_t{1} << 24, &config.max_num_batched_tokens));
  config.threads = static_cast<int32_t>(threads);
  config.block_size = static_cast<int32_t>(block_size);
  config.max_num_seqs = static_cast<int32_t>(max_num_seqs);
  if (auto dtype = args.get("--kv-cache-dtype")) {
    if (*dtype == "f16") {
      config.kv_cache_dtype = KvCacheDtype::kF16;
    } else if (*dtype == "f32") {
      config.kv_cache_dtype = KvCacheDtype::kF32;
    } else {
      return invalid_argument("--kv-cache-dtype must be f16 or f32, got '" + *dtype + "'");
    }
  }
  if (auto backend = args.get("--backend")) {
    const std::vector<std::string> known = backend::available_backends();
    if (std::find(known.begin(), known.end(), *backend) == known.end()) {
      std::string list;
      for (const std::string& b : known) list += (list.empty() ? "" : ", ") + b;
      return invalid_argument("--backend must be one of " + list + ", got '" + *backend + "'");
    }
    config.backend = *backend;
  }
  if (args.has("--no-prefix-caching")) config.enable_prefix_caching = false;
  if (args.has("--batch-invariant")) config.batch_invariant = true;
  if (args.has("--no-async-scheduling")) config.async_scheduling = false;
  if (args.has("--no-overlap-masks")) config.overlap_masks = false;
  if (args.has("--no-swa-replay")) config.swa_replay = false;
  if (args.has("--no-grammar-fast-forward")) config.grammar_fast_forward = false;
  DI_RETURN_IF_ERROR(read_kv_store_flags(args, config));
  DI_RETURN_IF_ERROR(read_speculative_flags(args, config));
  return config;
}

Result<std::string> resolve_model_flag(const Args& args) {
  return resolve_model_path(args.get("--model").value_or(std::string(kDefaultModelName)));
}

}  // namespace deepinfer::cli
