// deepinfer serve: the OpenAI- and Anthropic-compatible HTTP server (src/server/serve.h).
#include <cstdio>
#include <cstdlib>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/loading.h"
#include "server/serve.h"

namespace deepinfer::cli {

namespace {

const char* kServeUsage = R"(usage: deepinfer serve [-m MODEL] [options]
  -m, --model MODEL          GGUF file, Hugging Face directory or known name (default: smollm2-135m-instruct)
  --host HOST                address to listen on (default 127.0.0.1)
  --port PORT                port (default 8000; 0 = any free port)
  --api-key KEY              require this key (Authorization: Bearer KEY or x-api-key: KEY);
                             DEEPINFER_API_KEY sets it too
  --served-model-name NAME   the model name clients use (default: the model's name)
  --max-num-seqs N           sequences in the running batch (default 64)
  --max-queue N              requests that may wait beyond those; more get 429 (default 512)
  --threads N                CPU threads (default: all cores)
  --shutdown-timeout S       seconds requests in flight may take after SIGTERM (default 30)
  --max-body-bytes N         request body limit, 413 above (default 33554432)
  --read-timeout S           seconds a request may take to arrive, 408 after (default 30)
  --no-swa-replay            sliding-window models (Gemma 3) take no prefix hit: cold recompute
  --kv-cache-dtype T         KV cache elements: f16 (default, half the memory) or f32
)";

}  // namespace

int serve_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--host", "--port", "--api-key", "--served-model-name", "--max-num-seqs",
                     "--max-queue", "--threads", "--shutdown-timeout", "--max-body-bytes", "--read-timeout",
                     "--kv-cache-dtype"};
  spec.switches = {"--no-swa-replay", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-h", "--help"}, {"-t", "--threads"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kServeUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kServeUsage, stdout);
    return 0;
  }
  auto port = args.get_int("--port", 8000);
  auto max_num_seqs = args.get_int("--max-num-seqs", 64);
  auto max_queue = args.get_int("--max-queue", 512);
  auto threads = args.get_int("--threads", 0);
  auto timeout = args.get_float("--shutdown-timeout", 30.0);
  auto max_body = args.get_int("--max-body-bytes", int64_t{32} << 20);
  auto read_timeout = args.get_float("--read-timeout", 30.0);
  for (const Status& s : {port.status(), max_num_seqs.status(), max_queue.status(), threads.status(),
                          timeout.status(), max_body.status(), read_timeout.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*port < 0 || *port > 65535) return fail("--port must be between 0 and 65535", 2);
  if (*max_num_seqs < 1 || *max_num_seqs > 4096) return fail("--max-num-seqs must be between 1 and 4096", 2);
  if (*max_queue < 0) return fail("--max-queue must be >= 0", 2);
  if (*threads < 0 || *threads > 1024) return fail("--threads must be between 0 and 1024", 2);
  if (*timeout < 0) return fail("--shutdown-timeout must be >= 0", 2);
  if (*max_body < 1) return fail("--max-body-bytes must be positive", 2);
  if (*read_timeout <= 0) return fail("--read-timeout must be positive", 2);
  auto kv_dtype = parse_kv_cache_dtype(args.get("--kv-cache-dtype"));
  if (!kv_dtype.ok()) return fail(kv_dtype.status().message(), 2);

  server::ServeOptions options;
  options.model = args.get("--model").value_or("");
  options.host = args.get("--host").value_or("127.0.0.1");
  options.port = static_cast<uint16_t>(*port);
  if (auto key = args.get("--api-key")) {
    options.api_keys.push_back(*key);
  } else if (const char* env = std::getenv("DEEPINFER_API_KEY"); env != nullptr && *env != '\0') {
    options.api_keys.push_back(env);
  }
  options.served_model_name = args.get("--served-model-name").value_or("");
  options.max_num_seqs = static_cast<int32_t>(*max_num_seqs);
  options.max_queue = *max_queue;
  options.threads = static_cast<int32_t>(*threads);
  options.shutdown_timeout_s = *timeout;
  options.max_body_bytes = static_cast<size_t>(*max_body);
  options.read_timeout_s = *read_timeout;
  options.swa_replay = !args.has("--no-swa-replay");
  options.kv_cache_dtype = *kv_dtype;
  Status status = server::serve(options);
  if (!status.ok()) return fail("serve: " + status.message());
  return 0;
}

}  // namespace deepinfer::cli
