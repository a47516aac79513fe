// `deepinfer serve`: load the model into an engine, serve the API over HTTP until SIGTERM or
// SIGINT, then shut down gracefully (stop accepting, let requests in flight finish up to the
// timeout, close everything). Blocks the calling thread; installs its own signal handling, so
// call it once per process from the main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/status.h"
#include "server/worker_role.h"

namespace deepinfer::server {

struct ServeOptions {
  // The engine's settings; model_path is the model's file (resolved), as EngineConfig says.
  EngineConfig engine;
  // The -m argument as the user gave it (a known name or a path; empty: the default model),
  // for the served model name.
  std::string model;
  std::string host = "127.0.0.1";
  uint16_t port = 8000;               // 0: any free port (the log line names it)
  std::vector<std::string> api_keys;  // empty: no authentication
  std::string served_model_name;      // empty: the model's name as given (or the file's stem)
  int64_t max_queue = 512;            // waiting requests before 429
  double shutdown_timeout_s = 30.0;
  double read_timeout_s = 30.0;       // a request must arrive within this (408 after)
  size_t max_body_bytes = size_t{32} << 20;
  // Local-server safety (docs/security.md): origins whose pages may call the server (CORS; empty:
  // none, "*": any) and Host names accepted besides localhost and IP addresses ("*": any).
  std::vector<std::string> allowed_origins;
  std::vector<std::string> allowed_hosts;
  WorkerRole role = WorkerRole::kBoth;  // prefill and decode need engine.kv_store_dir
};

// Returns after a graceful shutdown (OK) or when loading or binding fails (the error).
Status serve(const ServeOptions& options);

}  // namespace deepinfer::server
