// The engine's command-line flags, declared once for every command that runs a model (run,
// score, generate, serve, chat, bench model), so a flag means the same everywhere: the model,
// threads, the KV cache's element type, capacity and block size, the scheduler's limits, prefix
// caching, batch invariance, asynchronous scheduling and SWA replay.
//
//   FlagSpec spec = {...the command's own flags...};
//   add_engine_flags(spec);
//   auto config = parse_engine_flags(args);        // INVALID_ARGUMENT naming the flag: exit 2
//   auto path = resolve_model_flag(args);          // a model that is not there: exit 1
//
// A command whose default differs on purpose (score keeps the KV cache in f32, exact) passes
// its own defaults; the usage text shows them.
#pragma once

#include <string>

#include "cli/args.h"
#include "deepinfer/engine.h"
#include "deepinfer/status.h"

namespace deepinfer::cli {

void add_engine_flags(FlagSpec& spec);

// The usage lines of those flags, with `defaults`' values.
std::string engine_flags_usage(const EngineConfig& defaults = {});

// The flags' values over `defaults`. model_path stays as it was: see resolve_model_flag.
Result<EngineConfig> parse_engine_flags(const Args& args, EngineConfig defaults = {});

// "512M", "8G" (powers of 1024) or a plain byte count; INVALID_ARGUMENT otherwise.
Result<int64_t> parse_byte_size(std::string_view text);
// "90s", "30m", "72h", "3d" or plain seconds; INVALID_ARGUMENT otherwise.
Result<int64_t> parse_duration_seconds(std::string_view text);

// The file -m names (a path, or a known model in the cache; none: the default model), or the
// NOT_FOUND of model/catalog.h's resolve_model_path.
Result<std::string> resolve_model_flag(const Args& args);

}  // namespace deepinfer::cli
