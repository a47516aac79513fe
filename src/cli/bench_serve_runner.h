// Sending the jobs of `deepinfer bench serve` to a server and timing every streamed event.
//
// Jobs start at their arrival times (from the dataset or the arrival process) and wait for one
// of `max_concurrency` workers (0: one worker per job, at most 1024); a request's clock starts
// when it is sent, as vLLM's does after its semaphore. Every request has a deadline: a server
// that refuses, errs, stalls or sends garbage gives a failed outcome with the reason, never an
// exception or a hang. One connection per request (loopback connects cost microseconds, and no
// keep-alive state can go stale between requests).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/bench_serve_dataset.h"
#include "cli/bench_serve_metrics.h"
#include "server/bench_protocol.h"
#include "server/http_client.h"

namespace deepinfer::cli {

// TokenCounter over the server's /tokenize and /detokenize: vLLM's and deepinfer's
// {"prompt"} form, else llama.cpp's {"content"} form; nullptr when the server has neither.
std::unique_ptr<TokenCounter> probe_server_counter(const server::HttpClient& client, const std::string& model,
                                                   std::string* why_not);

struct RunOptions {
  server::bench::Endpoint endpoint = server::bench::Endpoint::kCompletions;
  std::string model;
  int64_t max_concurrency = 0;
  std::chrono::milliseconds request_timeout{600000};
  bool exact_output = true;  // ignore_eos + min_tokens
  bool progress = true;      // a bar on stderr
};

struct RunResult {
  std::vector<RequestOutcome> outcomes;  // one per request, jobs in order, a session's turns in order
  double duration_s = 0.0;
};

// `arrivals[i]`: when job i may start, in seconds from the start.
RunResult run_jobs(const server::HttpClient& client, const std::vector<Job>& jobs, const std::vector<double>& arrivals,
                   const RunOptions& options);

// One request, timed (the initial test request, and each of run_jobs). `start` is set relative
// to `run_start`. output_len is the server's usage count, or -1 when it gave none.
RequestOutcome send_request(const server::HttpClient& client, const RunOptions& options, const std::vector<Turn>& turns,
                            int64_t prompt_len, int64_t output_len, std::chrono::steady_clock::time_point run_start);

// Output lengths the server did not report: the generated text counted with `counter` (vLLM
// tokenizes it), or without one the number of streamed events.
void fill_output_lengths(std::vector<RequestOutcome>& outcomes, TokenCounter* counter);

}  // namespace deepinfer::cli
