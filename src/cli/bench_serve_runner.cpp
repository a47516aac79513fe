#include "cli/bench_serve_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "server/sse_reader.h"

namespace deepinfer::cli {

namespace {

using server::bench::Endpoint;
using server::bench::StreamEvent;
using SteadyClock = std::chrono::steady_clock;
constexpr auto kShortTimeout = std::chrono::seconds(30);

double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

class ServerCounter final : public TokenCounter {
 public:
  ServerCounter(const server::HttpClient& client, std::string model, server::bench::TokenizeStyle style)
      : client_(client), model_(std::move(model)), style_(style) {}
  Result<std::vector<int32_t>> tokenize(const std::string& text) override {
    auto r = client_.post("/tokenize", server::bench::encode_tokenize(style_, model_, text), SteadyClock::now() + kShortTimeout);
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("/tokenize: HTTP " + std::to_string(r->status) + ": " + server::bench::error_message(r->body));
    return server::bench::decode_tokenize(r->body);
  }
  Result<std::string> detokenize(const std::vector<int32_t>& ids) override {
    auto r = client_.post("/detokenize", server::bench::encode_detokenize(model_, ids), SteadyClock::now() + kShortTimeout);
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("/detokenize: HTTP " + std::to_string(r->status) + ": " + server::bench::error_message(r->body));
    return server::bench::decode_detokenize(r->body);
  }
  bool exact() const override { return true; }

 private:
  const server::HttpClient& client_;
  std::string model_;
  server::bench::TokenizeStyle style_;
};

// What one streamed request has seen so far (vLLM's request function, event by event).
struct StreamTimer {
  Endpoint endpoint;
  SteadyClock::time_point sent;
  SteadyClock::time_point last;
  bool first_seen = false;
  RequestOutcome& out;
  int64_t usage_tokens = -1;

  // False once the stream must stop (an error event).
  bool on_event(const server::SseEvent& sse) {
    StreamEvent e = server::bench::decode_stream_event(endpoint, sse.event, sse.data);
    const auto now = SteadyClock::now();
    if (e.completion_tokens >= 0) usage_tokens = e.completion_tokens;
    switch (e.kind) {
      case StreamEvent::Kind::kError:
        out.error = "error event: " + e.error;
        return false;
      case StreamEvent::Kind::kDone:
        return true;
      case StreamEvent::Kind::kChoice:
        if (!first_seen) {
          first_seen = true;
          out.ttft = seconds_between(sent, now);
        } else {
          out.itl.push_back(seconds_between(last, now));
        }
        out.generated_text += e.text;
        last = now;
        return true;
      case StreamEvent::Kind::kUsage:
      case StreamEvent::Kind::kOther:
        // vLLM ends a chat request's latency at its last event of any kind, a completion's at its
        // last choice.
        if (endpoint != Endpoint::kCompletions && first_seen) last = now;
        return true;
    }
    return true;
  }
};

// A bar on stderr, redrawn four times a second while the run lasts.
class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled) : total_(total), enabled_(enabled) {
    if (enabled_) thread_ = std::thread([this] { loop(); });
  }
  ~ProgressBar() {
    if (!enabled_) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    draw();
    std::fputc('\n', stderr);
  }
  void add(size_t n) { done_ += n; }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) draw();
  }
  void draw() {
    constexpr int kWidth = 30;
    const size_t done = done_.load();
    const int filled = total_ ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu requests, %.1f s", filled, "==============================",
                 kWidth - filled, "", done, total_, seconds_between(start_, SteadyClock::now()));
    std::fflush(stderr);
  }

  size_t total_;
  bool enabled_;
  std::atomic<size_t> done_{0};
  SteadyClock::time_point start_ = SteadyClock::now();
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// A job's requests, in order; a chained job sends the conversation so far with each turn.
std::vector<RequestOutcome> run_job(const server::HttpClient& client, const Job& job, const RunOptions& options,
                                    SteadyClock::time_point run_start, ProgressBar& bar) {
  std::vector<RequestOutcome> outcomes;
  std::vector<Turn> history;
  int64_t context_len = 0;
  for (const RequestSpec& r : job.requests) {
    if (!outcomes.empty() && !outcomes.back().success) {
      RequestOutcome skipped;
      skipped.error = "not sent: an earlier turn of the session failed";
      skipped.prompt_len = r.prompt_len;
      outcomes.push_back(std::move(skipped));
      bar.add(1);
      continue;
    }
    std::vector<Turn> turns = history;
    turns.insert(turns.end(), r.turns.begin(), r.turns.end());
    const int64_t prompt_len = job.chained ? context_len + r.prompt_len : r.prompt_len;
    outcomes.push_back(send_request(client, options, job.chained ? turns : r.turns, prompt_len, r.output_len, run_start));
    bar.add(1);
    if (job.chained) {
      history = std::move(turns);
      history.push_back({"assistant", outcomes.back().generated_text});
      context_len = prompt_len + std::max<int64_t>(outcomes.back().output_len, 0);
    }
  }
  return outcomes;
}

}  // namespace

std::unique_ptr<TokenCounter> probe_server_counter(const server::HttpClient& client, const std::string& model,
                                                   std::string* why_not) {
  for (auto style : {server::bench::TokenizeStyle::kPrompt, server::bench::TokenizeStyle::kContent}) {
    auto counter = std::make_unique<ServerCounter>(client, model, style);
    auto ids = counter->tokenize("the river");
    if (!ids.ok() || ids->empty()) {
      if (why_not) *why_not = ids.ok() ? "/tokenize answered no tokens" : ids.status().message();
      continue;
    }
    auto text = counter->detokenize(*ids);
    if (text.ok() && text->find("river") != std::string::npos) return counter;
    if (why_not) *why_not = text.ok() ? "/detokenize did not give the text back" : text.status().message();
  }
  return nullptr;
}

RequestOutcome send_request(const server::HttpClient& client, const RunOptions& options, const std::vector<Turn>& turns,
                            int64_t prompt_len, int64_t output_len, SteadyClock::time_point run_start) {
  server::bench::GenerationBody body;
  body.model = options.model;
  body.turns = turns;
  body.max_tokens = output_len;
  body.exact_output = options.exact_output;
  const std::string json = server::bench::encode_generation(options.endpoint, body);
  RequestOutcome out;
  out.prompt_len = prompt_len;
  out.output_len = -1;
  const auto sent = SteadyClock::now();
  out.start = seconds_between(run_start, sent);
  StreamTimer timer{options.endpoint, sent, sent, false, out};
  server::SseReader sse;
  server::HttpHead head;
  std::string error_body;
  Status s = client.request("POST", server::bench::endpoint_path(options.endpoint), json, sent + options.request_timeout, head,
                            [&](std::string_view piece) {
                              if (head.status != 200) {
                                error_body.append(piece.substr(0, 4096 - std::min<size_t>(4096, error_body.size())));
                                return true;
                              }
                              for (const server::SseEvent& e : sse.feed(piece)) {
                                if (!timer.on_event(e)) return false;
                              }
                              return true;
                            });
  if (s.ok() && head.status == 200) {
    for (const server::SseEvent& e : sse.finish()) timer.on_event(e);
  }
  if (!s.ok()) {
    out.error = s.message();
  } else if (head.status != 200) {
    out.error = "HTTP " + std::to_string(head.status) + ": " + server::bench::error_message(error_body);
  } else if (out.error.empty() && !timer.first_seen) {
    out.error = "the stream ended before its first token";
  }
  out.success = out.error.empty();
  if (out.success) {
    out.latency = seconds_between(sent, timer.last);
    out.output_len = timer.usage_tokens > 0 ? timer.usage_tokens : -1;
  } else {
    out.ttft = 0.0;
    out.itl.clear();
    out.output_len = 0;
  }
  return out;
}

RunResult run_jobs(const server::HttpClient& client, const std::vector<Job>& jobs, const std::vector<double>& arrivals,
                   const RunOptions& options) {
  size_t n_requests = 0;
  for (const Job& j : jobs) n_requests += j.requests.size();
  const size_t n_workers = options.max_concurrency > 0 ? static_cast<size_t>(options.max_concurrency)
                                                       : std::min<size_t>(jobs.size(), 1024);
  std::vector<std::vector<RequestOutcome>> per_job(jobs.size());
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<size_t> ready;
  bool all_queued = false;
  RunResult result;
  const auto run_start = SteadyClock::now();
  {
    ProgressBar bar(n_requests, options.progress);
    std::vector<std::thread> workers;
    for (size_t w = 0; w < std::min(n_workers, jobs.size()); ++w) {
      workers.emplace_back([&] {
        while (true) {
          size_t i = 0;
          {
            std::unique_lock lock(mutex);
            cv.wait(lock, [&] { return !ready.empty() || all_queued; });
            if (ready.empty()) return;
            i = ready.front();
            ready.pop_front();
          }
          per_job[i] = run_job(client, jobs[i], options, run_start, bar);
        }
      });
    }
    for (size_t i = 0; i < jobs.size(); ++i) {
      std::this_thread::sleep_until(run_start + std::chrono::duration_cast<SteadyClock::duration>(
                                                    std::chrono::duration<double>(arrivals[i])));
      {
        std::lock_guard lock(mutex);
        ready.push_back(i);
      }
      cv.notify_one();
    }
    {
      std::lock_guard lock(mutex);
      all_queued = true;
    }
    cv.notify_all();
    for (std::thread& t : workers) t.join();
    result.duration_s = seconds_between(run_start, SteadyClock::now());
  }
  for (auto& outcomes : per_job) {
    for (auto& o : outcomes) result.outcomes.push_back(std::move(o));
  }
  return result;
}

void fill_output_lengths(std::vector<RequestOutcome>& outcomes, TokenCounter* counter) {
  for (RequestOutcome& o : outcomes) {
    if (!o.success || o.output_len >= 0) continue;
    o.output_len = static_cast<int64_t>(o.itl.size()) + 1;
    if (counter && counter->exact() && !o.generated_text.empty()) {
      if (auto ids = counter->tokenize(o.generated_text); ids.ok()) o.output_len = static_cast<int64_t>(ids->size());
    }
  }
}

}  // namespace deepinfer::cli
