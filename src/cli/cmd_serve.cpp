// deepinfer serve: the OpenAI- and Anthropic-compatible HTTP server (src/server/serve.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "server/serve.h"

namespace deepinfer::cli {

namespace {

const char* kServeUsage = R"(usage: deepinfer serve [-m MODEL] [options]
  --host HOST                address to listen on (default 127.0.0.1)
  --port PORT                port (default 8000; 0 = any free port)
  --api-key KEY              require this key (Authorization: Bearer KEY or x-api-key: KEY);
                             DEEPINFER_API_KEY sets it too
  --served-model-name NAME   the model name clients use (default: the model's name)
  --max-queue N              requests that may wait beyond --max-num-seqs; more get 429 (default 512)
  --shutdown-timeout S       seconds requests in flight may take after SIGTERM (default 30)
  --max-body-bytes N         request body limit, 413 above (default 33554432)
  --read-timeout S           seconds a request may take to arrive, 408 after (default 30)
  --allowed-origins LIST     comma-separated origins (http://host:port) whose web pages may call
                             the server (CORS), or '*'; default none: other origins get 403
  --allowed-hosts LIST       comma-separated Host names accepted besides localhost and IP
                             addresses (DNS-rebinding check on a loopback address), or '*'
  --role both|prefill|decode a worker's part in a prefill/decode split behind `deepinfer router
                             --prefill URL --decode URL` (default both); prefill and decode need
                             one shared --kv-store (docs/deployment.md)
)";

std::string usage() { return kServeUsage + engine_flags_usage(); }

// "a, b,,c" -> {"a", "b", "c"}
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace

int serve_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.takes_positional = false;
  spec.with_value = {"--host", "--port", "--api-key", "--served-model-name", "--max-queue", "--shutdown-timeout",
                     "--max-body-bytes", "--read-timeout", "--allowed-origins", "--allowed-hosts", "--role"};
  spec.switches = {"--help"};
  spec.aliases = {{"-h", "--help"}};
  add_engine_flags(spec);
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + usage(), 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  auto engine = parse_engine_flags(args);
  if (!engine.ok()) return fail(engine.status().message(), 2);
  auto port = args.get_int("--port", 8000);
  auto max_queue = args.get_int("--max-queue", 512);
  auto timeout = args.get_float("--shutdown-timeout", 30.0);
  auto max_body = args.get_int("--max-body-bytes", int64_t{32} << 20);
  auto read_timeout = args.get_float("--read-timeout", 30.0);
  for (const Status& s : {port.status(), max_queue.status(), timeout.status(), max_body.status(),
                          read_timeout.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*port < 0 || *port > 65535) return fail("--port must be between 0 and 65535", 2);
  if (*max_queue < 0) return fail("--max-queue must be >= 0", 2);
  if (*timeout < 0) return fail("--shutdown-timeout must be >= 0", 2);
  if (*max_body < 1) return fail("--max-body-bytes must be positive", 2);
  if (*read_timeout <= 0) return fail("--read-timeout must be positive", 2);
  auto path = resolve_model_flag(args);
  if (!path.ok()) return fail("serve: " + path.status().message());

  server::ServeOptions options;
  options.engine = std::move(engine).value();
  options.engine.model_path = *path;
  options.model = args.get("--model").value_or("");
  options.host = args.get("--host").value_or("127.0.0.1");
  options.port = static_cast<uint16_t>(*port);
  if (auto key = args.get("--api-key")) {
    options.api_keys.push_back(*key);
  } else if (const char* env = std::getenv("DEEPINFER_API_KEY"); env != nullptr && *env != '\0') {
    options.api_keys.push_back(env);
  }
  options.served_model_name = args.get("--served-model-name").value_or("");
  options.max_queue = *max_queue;
  options.shutdown_timeout_s = *timeout;
  options.max_body_bytes = static_cast<size_t>(*max_body);
  options.read_timeout_s = *read_timeout;
  options.allowed_origins = split_list(args.get("--allowed-origins").value_or(""));
  options.allowed_hosts = split_list(args.get("--allowed-hosts").value_or(""));
  const std::string role = args.get("--role").value_or("both");
  if (role == "both") {
    options.role = server::WorkerRole::kBoth;
  } else if (role == "prefill") {
    options.role = server::WorkerRole::kPrefill;
  } else if (role == "decode") {
    options.role = server::WorkerRole::kDecode;
  } else {
    return fail("--role must be both, prefill or decode (got '" + role + "')", 2);
  }
  if (options.role != server::WorkerRole::kBoth && options.engine.kv_store_dir.empty()) {
    return fail("--role " + role + " needs --kv-store DIR: the store carries the prompt's KV pages between the workers", 2);
  }
  Status status = server::serve(options);
  if (!status.ok()) return fail("serve: " + status.message());
  return 0;
}

}  // namespace deepinfer::cli
