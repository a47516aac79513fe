// The deepinfer command: dispatches to one subcommand.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/pull.h"

namespace {

const char* kUsage = R"(deepinfer: LLM inference engine

usage: deepinfer <command> [options]      (deepinfer <command> --help for its options)

commands:
  serve    OpenAI- and Anthropic-compatible HTTP API server
  run      generate text from one prompt, streamed to the terminal
  chat     an interactive conversation in the terminal (or over a pipe), replies streamed
  score    teacher-forced log-probabilities of given token ids (JSON)
  generate offline batch inference through the engine: JSONL requests in, JSONL results out
  tokenize    text -> token ids (or pieces) with a model's tokenizer
  detokenize  token ids -> text
  render   a Chat Completions / Responses / Messages request (stdin) -> the model's prompt
  parse    raw model output (stdin) -> the protocol's response or its SSE events
  pull     fetch a known model into the local cache (pull --list shows them)
  bench    kernel (bench ops) and model (bench model) speeds beside the memory bandwidth;
           bench serve: TTFT, TPOT and throughput of a running server, as vllm bench serve
  kvstore  the KV-cache store's directory: stat, verify, gc, bench; replay-trace (hit rate)
  router   HTTP front door over serve replicas: cache-aware load balancing, health, failover
  cluster  cluster up CONFIG: replicas, router and KV store as local processes, one config
  version  print the version
)";

}  // namespace

namespace deepinfer::cli {
int fail(const std::string& message, int code) {
  std::fprintf(stderr, "deepinfer: %s\n", message.c_str());
  return code;
}
}  // namespace deepinfer::cli

int main(int argc, char** argv) {
  using namespace deepinfer::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "run") return run_command(args);
  if (command == "chat") return chat_command(args);
  if (command == "score") return score_command(args);
  if (command == "generate") return generate_command(args);
  if (command == "tokenize") return tokenize_command(args);
  if (command == "detokenize") return detokenize_command(args);
  if (command == "serve") return serve_command(args);
  if (command == "render") return render_command(args);
  if (command == "parse") return parse_command(args);
  if (command == "pull") return run_pull(argc - 1, argv + 1);
  if (command == "bench") return bench_command(args);
  if (command == "kvstore") return kvstore_command(args);
  if (command == "router") return router_command(args);
  if (command == "cluster") return cluster_command(args);
  if (command == "version" || command == "--version") {
    std::puts("deepinfer 0.1.0");
    return 0;
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
