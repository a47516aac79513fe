// deepinfer chat: an interactive conversation in the terminal. Each line read is a user turn;
// the whole conversation is rendered in the model's chat format (chat_prompt.h) and the reply
// streams back through the engine token by token. The turns before are part of every prompt,
// and the prefix cache keeps their KV, so a new turn computes little more than itself.
//
// Lines come from stdin, a terminal or a pipe (the "> " prompt appears on a terminal only), so
// a script or a test can hold a conversation. Ctrl-C during a reply stops that reply; at the
// prompt it quits, as end of input and /exit do.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/loading.h"
#include "cli/sampling_flags.h"

namespace deepinfer::cli {

namespace {

const char* kChatUsage = R"(usage: deepinfer chat [-m MODEL] [--system TEXT] [options]
  A conversation in the terminal: each line is a user turn, the reply streams back. Every
  prompt holds the conversation so far, in the model's chat template.
    /reset   forget the conversation (the --system message stays)
    /exit    quit (so does end of input)
  Lines may come from a pipe as well as a terminal.
  --system TEXT          system message
  --stats                after each reply, one line on stderr: the prompt's tokens (how many from
                         the prefix cache), the reply's tokens and their speed
)";

std::string usage() { return std::string(kChatUsage) + kSamplingFlagsUsage + engine_flags_usage(); }

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) { g_interrupted.store(true); }

// While a reply streams, Ctrl-C stops the reply instead of the process.
class InterruptCatcher {
 public:
  InterruptCatcher() {
    g_interrupted.store(false);
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptCatcher() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptCatcher(const InterruptCatcher&) = delete;
  InterruptCatcher& operator=(const InterruptCatcher&) = delete;

 private:
  struct sigaction previous_ {};
};

struct Reply {
  std::string text;
  std::string error;  // the engine failed the reply (FinishReason::kError)
  int64_t n_prompt = 0, n_cached = 0, n_tokens = 0;
  double decode_seconds = 0.0;  // from the first token to the last
};

// Streams one reply to stdout.
Reply stream_reply(RequestHandle& handle) {
  InterruptCatcher catcher;
  Reply reply;
  Clock::time_point first{}, last{};
  TokenEvent e;
  for (WaitStatus w; (w = handle.next_for(std::chrono::milliseconds(100), &e)) != WaitStatus::kEnd;) {
    if (g_interrupted.exchange(false)) handle.cancel();
    if (w != WaitStatus::kEvent) continue;
    last = Clock::now();
    if (reply.n_tokens == 0) {
      first = last;
      reply.n_prompt = e.n_prompt_tokens;
      reply.n_cached = e.n_cached_prompt_tokens;
    }
    reply.n_tokens += static_cast<int64_t>(e.tokens.size());
    reply.text += e.text;
    if (e.finish == FinishReason::kError) reply.error = e.error;
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
  }
  reply.decode_seconds = std::chrono::duration<double>(last - first).count();
  return reply;
}

class Chat {
 public:
  Chat(LoadedEngine loaded, const std::string& model_path, SamplingFlags sampling, std::string system, bool stats)
      : loaded_(std::move(loaded)), renderer_(loaded_.tokenizer, model_path), sampling_(std::move(sampling)),
        system_(std::move(system)), stats_(stats) {
    reset();
  }

  // Whether the model can hold a conversation at all (a chat template or turn markers).
  Status check() const {
    std::vector<recipe::Message> probe = messages_;
    probe.push_back(recipe::Message::user("hello"));
    return renderer_.render(probe).status();
  }

  void reset() {
    messages_.clear();
    if (!system_.empty()) messages_.push_back(recipe::Message::system(system_));
  }

  // One user turn and its reply; an error only for what ends the conversation.
  Status turn(const std::string& line) {
    messages_.push_back(recipe::Message::user(line));
    DI_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, renderer_.render(messages_));
    GenerationRequest request;
    request.prompt = std::move(prompt);
    request.sampling = sampling_.params;
    request.max_tokens = sampling_.max_tokens;
    auto handle = loaded_.engine->submit(std::move(request));
    if (!handle.ok() && handle.status().code() == StatusCode::kOutOfRange) {
      messages_.pop_back();
      std::fprintf(stderr, "deepinfer: %s; /reset starts a new conversation\n", handle.status().message().c_str());
      return {};
    }
    if (!handle.ok()) return handle.status();
    Reply reply = stream_reply(**handle);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!reply.error.empty()) {
      // The turn failed: it leaves the conversation as it was, and the user may ask again.
      messages_.pop_back();
      std::fprintf(stderr, "deepinfer: %s\n", reply.error.c_str());
      return {};
    }
    messages_.push_back(recipe::Message::assistant(reply.text));
    if (stats_) {
      const int64_t decoded = std::max<int64_t>(0, reply.n_tokens - 1);
      std::fprintf(stderr, "prompt: %lld tokens (%lld cached) | reply: %lld tokens, %.1f tokens/s\n",
                   static_cast<long long>(reply.n_prompt), static_cast<long long>(reply.n_cached),
                   static_cast<long long>(reply.n_tokens),
                   decoded > 0 && reply.decode_seconds > 0 ? decoded / reply.decode_seconds : 0.0);
    }
    return {};
  }

 private:
  LoadedEngine loaded_;
  ChatRenderer renderer_;
  SamplingFlags sampling_;
  std::string system_;
  bool stats_;
  std::vector<recipe::Message> messages_;
};

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

int chat_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--system"};
  spec.switches = {"--stats", "--help"};
  spec.aliases = {{"-h", "--help"}};
  add_sampling_flags(spec);
  add_engine_flags(spec);
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + usage(), 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (!args.positional().empty()) return fail("chat reads its turns from stdin, not from arguments\n" + usage(), 2);
  auto sampling = parse_sampling_flags(args);
  if (!sampling.ok()) return fail(sampling.status().message(), 2);
  auto config = parse_engine_flags(args);
  if (!config.ok()) return fail(config.status().message(), 2);
  auto path = resolve_model_flag(args);
  if (!path.ok()) return fail(path.status().message());
  config->model_path = *path;
  auto loaded = load_engine(*config);
  if (!loaded.ok()) return fail(loaded.status().message());
  if (!loaded->tokenizer) return fail(*path + " carries no tokenizer; chat needs one");

  Chat chat(std::move(loaded).value(), *path, std::move(sampling).value(), args.get("--system").value_or(""),
            args.has("--stats"));
  if (Status st = chat.check(); !st.ok()) return fail(*path + ": " + st.message());
  const bool terminal = isatty(STDIN_FILENO) != 0;
  if (terminal) std::fputs("deepinfer chat: /reset forgets the conversation, /exit or Ctrl-D quits\n", stderr);
  std::string line;
  while (true) {
    if (terminal) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    const std::string text = trimmed(line);
    if (text.empty()) continue;
    if (text == "/exit" || text == "/quit") break;
    if (text == "/reset") {
      chat.reset();
      std::fputs("(the conversation is forgotten)\n", stderr);
      continue;
    }
    if (text.front() == '/' && text.find(' ') == std::string::npos) {
      std::fprintf(stderr, "unknown command %s: /reset forgets the conversation, /exit quits\n", text.c_str());
      continue;
    }
    if (Status st = chat.turn(text); !st.ok()) return fail(st.message(), submit_exit_code(st));
  }
  if (terminal) std::fputc('\n', stdout);
  return 0;
}

}  // namespace deepinfer::cli
