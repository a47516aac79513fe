// deepinfer parse: raw model output (stdin) -> the protocol's response, complete or as SSE.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "recipe/output_parser.h"
#include "recipe/respond.h"

namespace deepinfer::cli {
namespace {

const char* kUsage =
    R"(usage: deepinfer parse --protocol chat|responses|messages [--request FILE] [-m NAME]
                      [--stream [--chunk N]] [--finish stop|length|content_filter]
                      [--id ID] [--prompt-tokens N] [--cached-tokens N] [--stats [--repeat R]]
  Reads what a model wrote on stdin and prints the response the protocol makes of it: the
  complete JSON body, or with --stream its server-sent events.
  --protocol P        chat (Chat Completions), responses (OpenAI Responses), messages (Anthropic)
  --request FILE      the request the output answers: its tools, thinking mode, JSON mode and stop
                      sequences decide how the output is read. Default: a one-message request to
                      DeepSeek-V4.1-Flash (thinking on: the output starts as reasoning)
  -m, --model NAME    the request's model NAME is a served model that is not DeepSeek: its tool
                      calls are <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks and it
                      has no thinking stage
  --stream            print the SSE events of a streamed response
  --chunk N           feed the output N characters at a time (default: all at once)
  --finish F          why the backend stopped (default stop)
  --id ID             the response id (default resp-0)
  --prompt-tokens N, --cached-tokens N   usage of the prompt (default 0); the output counts one
                      token per fed chunk
  --stats             print {"bytes", "chunks", "parse_mb_per_s", "respond_mb_per_s"} instead:
                      the output parser alone, and the whole response (parser and protocol
                      writer), fed --chunk N characters at a time (default 4), best of R runs
)";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Throughput of the parser alone and of the whole response, output fed in `chunk` characters.
int print_stats(recipe::Protocol protocol, const std::string& request, const std::string& output,
                recipe::RespondSettings settings, const recipe::ConversionOptions& options,
                int64_t repeat) {
  auto req = recipe::convert_request(protocol, request, options);
  if (!req.ok()) return fail("request rejected: " + req.status().message());
  const std::vector<std::string_view> chunks = recipe::split_chars(output, settings.chunk_chars);
  double parse_best = 1e300, respond_best = 1e300;
  size_t events = 0;
  for (int64_t r = 0; r < repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    recipe::OutputParser parser(req->parsing_options);
    events = 0;
    for (std::string_view chunk : chunks) events += parser.feed(chunk).size();
    events += parser.finish().size();
    parse_best = std::min(parse_best, seconds_since(start));
    start = std::chrono::steady_clock::now();
    auto response = recipe::respond(protocol, request, output, settings, options);
    if (!response.ok()) return fail(response.status().message());
    respond_best = std::min(respond_best, seconds_since(start));
  }
  const double mb = static_cast<double>(output.size()) / 1e6;
  const nlohmann::json stats = {{"bytes", output.size()},
                                {"chunks", chunks.size()},
                                {"events", events},
                                {"parse_mb_per_s", mb / parse_best},
                                {"respond_mb_per_s", mb / respond_best},
                                {"stream", settings.stream}};
  std::puts(stats.dump().c_str());
  return 0;
}

std::string default_request(recipe::Protocol protocol, const std::string& model) {
  switch (protocol) {
    case recipe::Protocol::kChat:
      return R"({"model":")" + model + R"(","messages":[{"role":"user","content":"hi"}]})";
    case recipe::Protocol::kResponses:
      return R"({"model":")" + model + R"(","input":"hi"})";
    case recipe::Protocol::kMessages:
      return R"({"model":")" + model +
             R"(","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]})";
  }
  return "";
}

}  // namespace

int parse_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.takes_positional = false;
  spec.with_value = {"--protocol", "--request", "--model",         "--chunk",        "--finish",
                     "--id",       "--repeat",  "--prompt-tokens", "--cached-tokens"};
  spec.switches = {"--stream", "--stats", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const auto protocol = recipe::parse_protocol(args.get("--protocol").value_or(""));
  if (!protocol)
    return fail(std::string("--protocol must be chat, responses or messages\n") + kUsage, 2);

  recipe::RespondSettings settings;
  settings.stream = args.has("--stream");
  settings.id = args.get("--id").value_or("resp-0");
  const std::string finish = args.get("--finish").value_or("stop");
  if (finish == "length") {
    settings.finish = recipe::BackendFinish::kLength;
  } else if (finish == "content_filter") {
    settings.finish = recipe::BackendFinish::kContentFilter;
  } else if (finish != "stop") {
    return fail("--finish must be stop, length or content_filter", 2);
  }
  auto chunk = args.get_int("--chunk", args.has("--stats") ? 4 : 0);
  auto repeat = args.get_int("--repeat", 1);
  if (!repeat.ok() || *repeat < 1) return fail("--repeat must be a number >= 1", 2);
  auto prompt_tokens = args.get_int("--prompt-tokens", 0);
  auto cached_tokens = args.get_int("--cached-tokens", 0);
  for (const auto* r : {&chunk, &prompt_tokens, &cached_tokens}) {
    if (!r->ok()) return fail(r->status().message(), 2);
    if (**r < 0) return fail("--chunk, --prompt-tokens and --cached-tokens must be >= 0", 2);
  }
  if (*cached_tokens > *prompt_tokens) return fail("--cached-tokens exceeds --prompt-tokens", 2);
  settings.chunk_chars = static_cast<size_t>(*chunk);
  settings.usage = {*prompt_tokens, *cached_tokens, -1};

  recipe::ConversionOptions options;
  const auto model = args.get("--model");
  if (model) options.model_versions.push_back({*model, recipe::ModelVersion::kChatTemplate});
  std::string request = default_request(*protocol, model.value_or("DeepSeek-V4.1-Flash"));
  if (auto file = args.get("--request")) {
    std::ifstream in(*file, std::ios::binary);
    if (!in) return fail(*file + ": cannot open the file");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    request = buffer.str();
  }
  const std::string output{std::istreambuf_iterator<char>(std::cin),
                           std::istreambuf_iterator<char>()};
  if (args.has("--stats")) {
    return print_stats(*protocol, request, output, settings, options, *repeat);
  }
  auto response = recipe::respond(*protocol, request, output, settings, options);
  if (!response.ok()) {
    return fail("request rejected (" + std::to_string(recipe::error_status(response.status())) +
                "): " + response.status().message());
  }
  std::fwrite(response->data(), 1, response->size(), stdout);
  if (!settings.stream) std::fputc('\n', stdout);
  return 0;
}

}  // namespace deepinfer::cli
