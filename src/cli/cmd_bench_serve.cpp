// deepinfer bench serve: the serving benchmark of `vllm bench serve` against any
// OpenAI- or Anthropic-compatible server, with its flag names, metric definitions and result
// keys, so that a command line and a result file carry over. Datasets, metrics, the runner and
// the report live in bench_serve_*.cpp; the JSON of the protocols in src/server/bench_protocol.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/bench_serve_dataset.h"
#include "cli/bench_serve_plot.h"
#include "cli/bench_serve_report.h"
#include "cli/bench_serve_runner.h"
#include "cli/commands.h"

namespace deepinfer::cli {

namespace {

const char* kUsage = R"(usage: deepinfer bench serve [--url URL] [--model NAME] [options]
  Streams requests to a running server and reports TTFT, TPOT (excluding the first token), ITL
  and end-to-end latency (mean, median, std, percentiles), request/input/output throughput and
  goodput, defined as `vllm bench serve` defines them. Flags carry vLLM's names.
  --url URL                  the server (default http://127.0.0.1:8000; --base-url is the same)
  --model NAME               the model name to send (default: the first of GET /v1/models)
  --endpoint-type T          openai (/v1/completions, default), openai-chat (/v1/chat/completions)
                             or anthropic (/v1/messages); --backend is the same
  --dataset-name D           random (default), prefix-repetition, sharegpt (synthetic, ShareGPT-
                             shaped), multi-turn (sessions whose context grows), mooncake (a trace)
  --dataset-path FILE        the Mooncake trace (JSONL: timestamp, input_length, output_length, hash_ids)
  --num-prompts N            requests (sessions for multi-turn; default 1000)
  --random-input-len N       (default 1024)   --random-output-len N (default 128)
  --random-range-ratio R     lengths uniform in [L(1-R), L(1+R)] (default 0)
  --random-prefix-len N      a prefix every random prompt shares (default 0)
  --prefix-repetition-prefix-len N (256)  --prefix-repetition-suffix-len N (256)
  --prefix-repetition-num-prefixes N (10) --prefix-repetition-output-len N (128)
  --sharegpt-output-len N    fixed reply length (default: log-normal)
  --multi-turn-num-turns N   user turns per session (default 4; lengths from --random-*)
  --trace-block-tokens N     mooncake: tokens per hash id (default 512; lengths scale by N/512)
  --request-rate R           requests per second, Poisson (default inf: all at once)
  --burstiness B             gamma shape of the gaps (default 1: Poisson; <1 burstier)
  --max-concurrency N        requests in flight at most (closed loop with --request-rate inf)
  --sweep-concurrency LIST   one run per concurrency, e.g. 1,4,16,64
  --prompts-per-concurrency K  in a sweep, max(--num-prompts, K x concurrency) requests per run
  --plot FILE.svg            with a sweep: latency and throughput against concurrency
  --goodput KEY:MS ...       SLOs for goodput, KEY ttft, tpot or e2el (e.g. --goodput ttft:500 tpot:50)
  --metric-percentiles LIST  (default 90,99)
  --seed N                   (default 0)
  --allow-eos                let requests stop at end of sequence (default: ignore_eos and
                             min_tokens ask for exactly the output length; --ignore-eos is accepted)
  --request-timeout S        seconds one request may take before it counts as failed (default 600)
  --ready-check-timeout-sec S  wait this long for the server to answer a first request (default 600; 0: none)
  --save-result              write the result JSON; --result-dir DIR, --result-filename NAME
  --label TEXT               a name for the run in the result
  --disable-tqdm             no progress bar on stderr
  OPENAI_API_KEY in the environment is sent as "Authorization: Bearer KEY", as vLLM does.
  Prompt lengths are exact for the server's tokenizer: prompts are cut with its /tokenize and
  /detokenize (vLLM's {"prompt"} form, else llama.cpp's {"content"}); a server without them gets
  prompts of one word per token, and the result says so (exact_input_lengths: false).
)";

struct Options {
  std::string url, model, endpoint_name, label, result_dir, result_filename, plot;
  server::bench::Endpoint endpoint = server::bench::Endpoint::kCompletions;
  DatasetOptions dataset;
  double request_rate = INFINITY, burstiness = 1.0;
  int64_t max_concurrency = 0, prompts_per_concurrency = 0;
  std::vector<int64_t> sweep;
  std::vector<double> percentiles{90, 99};
  Slo slo;
  bool exact_output = true, save = false, progress = true;
  double request_timeout_s = 600, ready_timeout_s = 600;
};

Result<std::vector<double>> number_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v >= 0)) return invalid_argument(flag + ": '" + item + "' is not a number >= 0");
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

Status parse_goodput(const std::vector<std::string>& items, Slo& slo) {
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    const std::string key = item.substr(0, colon);
    char* end = nullptr;
    const double ms = colon == std::string::npos ? -1 : std::strtod(item.c_str() + colon + 1, &end);
    if (colon == std::string::npos || *end != '\0' || !(ms >= 0)) {
      return invalid_argument("--goodput: '" + item + "' is not KEY:MILLISECONDS (ttft, tpot or e2el)");
    }
    if (key == "ttft") slo.ttft_ms = ms;
    else if (key == "tpot") slo.tpot_ms = ms;
    else if (key == "e2el") slo.e2el_ms = ms;
    else return invalid_argument("--goodput: unknown metric '" + key + "' (ttft, tpot or e2el)");
  }
  return Status::ok_status();
}

Result<server::bench::Endpoint> endpoint_named(const std::string& name) {
  if (name == "openai" || name == "completions" || name == "vllm" || name == "openai-completions") {
    return server::bench::Endpoint::kCompletions;
  }
  if (name == "openai-chat" || name == "chat") return server::bench::Endpoint::kChat;
  if (name == "anthropic" || name == "messages" || name == "anthropic-messages") return server::bench::Endpoint::kMessages;
  return invalid_argument("--endpoint-type: unknown '" + name + "' (openai, openai-chat or anthropic)");
}

Status read_int(const Args& args, const char* flag, int64_t& into, int64_t min) {
  auto v = args.get_int(flag, into);
  if (!v.ok()) return v.status();
  if (*v < min) return invalid_argument(std::string(flag) + " must be >= " + std::to_string(min));
  into = *v;
  return Status::ok_status();
}

Result<Options> parse_options(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--url", "--model", "--endpoint-type", "--dataset-name", "--dataset-path", "--num-prompts",
                     "--random-input-len", "--random-output-len", "--random-range-ratio", "--random-prefix-len",
                     "--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len", "--prefix-repetition-num-prefixes",
                     "--prefix-repetition-output-len", "--sharegpt-output-len", "--multi-turn-num-turns", "--trace-block-tokens",
                     "--request-rate", "--burstiness", "--max-concurrency", "--sweep-concurrency", "--prompts-per-concurrency",
                     "--plot", "--goodput", "--metric-percentiles", "--seed", "--request-timeout", "--ready-check-timeout-sec",
                     "--result-dir", "--result-filename", "--label"};
  spec.switches = {"--save-result", "--disable-tqdm", "--allow-eos", "--ignore-eos", "--help"};
  spec.aliases = {{"--base-url", "--url"}, {"--backend", "--endpoint-type"}, {"-h", "--help"}};
  DI_ASSIGN_OR_RETURN(Args args, Args::parse(argv, spec));
  Options o;
  if (args.has("--help")) return invalid_argument("");
  o.url = args.get("--url").value_or("http://127.0.0.1:8000");
  o.model = args.get("--model").value_or("");
  o.endpoint_name = args.get("--endpoint-type").value_or("openai");
  DI_ASSIGN_OR_RETURN(o.endpoint, endpoint_named(o.endpoint_name));
  DatasetOptions& d = o.dataset;
  d.name = args.get("--dataset-name").value_or("random");
  d.dataset_path = args.get("--dataset-path").value_or("");
  for (auto [flag, into, min] : std::initializer_list<std::tuple<const char*, int64_t*, int64_t>>{
           {"--num-prompts", &d.num_prompts, 1}, {"--random-input-len", &d.random_input_len, 1},
           {"--random-output-len", &d.random_output_len, 1}, {"--random-prefix-len", &d.random_prefix_len, 0},
           {"--prefix-repetition-prefix-len", &d.prefix_len, 1}, {"--prefix-repetition-suffix-len", &d.suffix_len, 1},
           {"--prefix-repetition-num-prefixes", &d.num_prefixes, 1}, {"--prefix-repetition-output-len", &d.prefix_output_len, 1},
           {"--sharegpt-output-len", &d.sharegpt_output_len, 0}, {"--multi-turn-num-turns", &d.num_turns, 1},
           {"--trace-block-tokens", &d.trace_block_tokens, 1}, {"--max-concurrency", &o.max_concurrency, 0},
           {"--prompts-per-concurrency", &o.prompts_per_concurrency, 0}}) {
    DI_RETURN_IF_ERROR(read_int(args, flag, *into, min));
  }
  int64_t seed = 0;
  DI_RETURN_IF_ERROR(read_int(args, "--seed", seed, 0));
  d.seed = static_cast<uint64_t>(seed);
  DI_ASSIGN_OR_RETURN(d.random_range_ratio, args.get_float("--random-range-ratio", 0.0));
  if (!(d.random_range_ratio >= 0 && d.random_range_ratio < 1)) return invalid_argument("--random-range-ratio must be in [0, 1)");
  const std::string rate = args.get("--request-rate").value_or("inf");
  if (rate != "inf") {
    DI_ASSIGN_OR_RETURN(o.request_rate, args.get_float("--request-rate", 0));
  }
  if (!(o.request_rate > 0)) return invalid_argument("--request-rate must be > 0 (or inf)");
  const std::string burst = args.get("--burstiness").value_or("1");
  if (burst == "inf") {
    o.burstiness = INFINITY;
  } else {
    DI_ASSIGN_OR_RETURN(o.burstiness, args.get_float("--burstiness", 1.0));
  }
  if (!(o.burstiness > 0)) return invalid_argument("--burstiness must be > 0");
  if (auto s = args.get("--sweep-concurrency")) {
    DI_ASSIGN_OR_RETURN(std::vector<double> values, number_list(*s, "--sweep-concurrency"));
    for (double v : values) {
      if (v < 1 || v != std::floor(v)) return invalid_argument("--sweep-concurrency: values must be integers >= 1");
      o.sweep.push_back(static_cast<int64_t>(v));
    }
  }
  if (auto s = args.get("--metric-percentiles")) {
    DI_ASSIGN_OR_RETURN(o.percentiles, number_list(*s, "--metric-percentiles"));
    for (double p : o.percentiles) {
      if (p > 100) return invalid_argument("--metric-percentiles: percentiles are in [0, 100]");
    }
  }
  // --goodput takes several KEY:MS words, as vLLM's does: the words after it land here as
  // positional arguments.
  std::vector<std::string> goodput;
  if (auto g = args.get("--goodput")) goodput.push_back(*g);
  for (const std::string& p : args.positional()) {
    if (goodput.empty()) return invalid_argument("unexpected argument '" + p + "'");
    goodput.push_back(p);
  }
  DI_RETURN_IF_ERROR(parse_goodput(goodput, o.slo));
  DI_ASSIGN_OR_RETURN(o.request_timeout_s, args.get_float("--request-timeout", 600));
  DI_ASSIGN_OR_RETURN(o.ready_timeout_s, args.get_float("--ready-check-timeout-sec", 600));
  if (!(o.request_timeout_s > 0)) return invalid_argument("--request-timeout must be > 0");
  o.exact_output = !args.has("--allow-eos");
  o.save = args.has("--save-result");
  o.progress = !args.has("--disable-tqdm") && ::isatty(STDERR_FILENO);
  o.label = args.get("--label").value_or("");
  o.result_dir = args.get("--result-dir").value_or("");
  o.result_filename = args.get("--result-filename").value_or("");
  o.plot = args.get("--plot").value_or("");
  if (!o.plot.empty() && o.sweep.empty()) return invalid_argument("--plot needs --sweep-concurrency");
  return o;
}

std::string now_text(const char* format) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

// vLLM's initial test request: wait for a server that is still starting (connections refused)
// up to the timeout. A server that answers with an error is not waited for: the run goes on and
// counts its failures.
void ready_check(const server::HttpClient& client, const RunOptions& run, const Job& job, double timeout_s) {
  if (timeout_s <= 0) return;
  const auto until = std::chrono::steady_clock::now() + to_ms(timeout_s);
  const RequestSpec& r = job.requests.front();
  while (true) {
    RunOptions quick = run;
    quick.request_timeout = std::min(run.request_timeout, to_ms(timeout_s));
    RequestOutcome o = send_request(client, quick, r.turns, r.prompt_len, r.output_len, std::chrono::steady_clock::now());
    if (o.success) return;
    const bool refused = o.error.find("cannot connect") != std::string::npos;
    if (!refused || std::chrono::steady_clock::now() >= until) {
      std::fprintf(stderr, "deepinfer: warning: the test request failed (%s); running anyway, failures are counted\n", o.error.c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

struct PointResult {
  std::string json;
  SweepPoint point;
};

PointResult run_point(const server::HttpClient& client, const Options& o, const std::string& model, TokenCounter& counter,
                      bool exact_lengths, int64_t concurrency, int64_t num_prompts) {
  DatasetOptions d = o.dataset;
  d.num_prompts = num_prompts;
  PointResult out;
  auto jobs = make_dataset(d, counter);
  if (!jobs.ok()) {
    out.json.clear();
    std::fprintf(stderr, "deepinfer: %s\n", jobs.status().message().c_str());
    return out;
  }
  std::vector<double> arrivals = arrival_times(jobs->size(), o.request_rate, o.burstiness, d.seed);
  for (size_t i = 0; i < jobs->size(); ++i) {
    if ((*jobs)[i].arrival >= 0) arrivals[i] = (*jobs)[i].arrival;  // a trace brings its own times
  }
  RunOptions run;
  run.endpoint = o.endpoint;
  run.model = model;
  run.max_concurrency = concurrency;
  run.request_timeout = to_ms(o.request_timeout_s);
  run.exact_output = o.exact_output;
  run.progress = o.progress;
  ready_check(client, run, jobs->front(), o.ready_timeout_s);
  RunResult result = run_jobs(client, *jobs, arrivals, run);
  fill_output_lengths(result.outcomes, exact_lengths ? &counter : nullptr);
  ServeMetrics m = compute_metrics(result.outcomes, result.duration_s, o.slo, o.percentiles);
  RunParameters p;
  p.date = now_text("%Y%m%d-%H%M%S");
  p.label = o.label;
  p.endpoint_type = o.endpoint_name;
  p.base_url = o.url;
  p.model_id = model;
  p.dataset_name = d.name;
  p.num_prompts = num_prompts;
  p.request_rate = o.request_rate;
  p.burstiness = o.burstiness;
  p.max_concurrency = concurrency;
  p.seed = d.seed;
  p.exact_input_lengths = exact_lengths;
  p.exact_output = o.exact_output;
  p.percentiles = o.percentiles;
  p.slo = o.slo;
  std::fputs(result_table(p, m, result.duration_s).c_str(), stdout);
  std::fflush(stdout);
  out.json = result_json(p, m, result.duration_s, result.outcomes, true);
  out.point.concurrency = static_cast<double>(concurrency);
  std::vector<double> ttfts;
  for (const RequestOutcome& r : result.outcomes) {
    if (r.success) ttfts.push_back(r.ttft);
  }
  Summary t = summarize(ttfts, {50, 99});
  out.point.ttft_p50_ms = t.percentiles[0] * 1000;
  out.point.ttft_p99_ms = t.percentiles[1] * 1000;
  out.point.tpot_p50_ms = m.tpot.median * 1000;
  out.point.output_throughput = m.output_throughput;
  return out;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << text) || !f.flush()) return unavailable("cannot write '" + path + "'");
  return Status::ok_status();
}

std::string default_filename(const Options& o, const std::string& model, int64_t concurrency) {
  std::string rate = std::isfinite(o.request_rate) ? std::to_string(o.request_rate) : "inf";
  std::string name = o.endpoint_name + "-" + rate + "qps";
  if (concurrency > 0) name += "-concurrency" + std::to_string(concurrency);
  if (!o.sweep.empty()) name += "-sweep";
  std::string base = model.substr(model.find_last_of('/') + 1);
  return name + "-" + base + "-" + now_text("%Y%m%d-%H%M%S") + ".json";
}

}  // namespace

int bench_serve_command(const std::vector<std::string>& argv) {
  for (const std::string& a : argv) {
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  auto parsed = parse_options(argv);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kUsage, 2);
  const Options& o = *parsed;
  auto url = server::parse_http_url(o.url);
  if (!url.ok()) return fail(url.status().message(), 2);
  server::Headers headers;
  if (const char* key = std::getenv("OPENAI_API_KEY"); key && *key) headers.push_back({"Authorization", std::string("Bearer ") + key});
  server::HttpClient client(*url, headers);
  std::string model = o.model;
  if (model.empty()) {
    auto r = client.get("/v1/models", std::chrono::steady_clock::now() + std::chrono::seconds(30));
    if (!r.ok()) return fail("--model not given and GET /v1/models failed: " + r.status().message());
    auto id = server::bench::decode_first_model(r->body);
    if (!id.ok()) return fail("--model not given and " + id.status().message());
    model = *id;
  }
  std::string why_not;
  std::unique_ptr<TokenCounter> counter = probe_server_counter(client, model, &why_not);
  const bool exact = counter != nullptr;
  if (!exact) {
    std::fprintf(stderr, "deepinfer: warning: no usable /tokenize on the server (%s): prompt lengths are estimates\n",
                 why_not.c_str());
    counter = make_word_counter();
  }
  std::vector<int64_t> points = o.sweep.empty() ? std::vector<int64_t>{o.max_concurrency} : o.sweep;
  std::vector<std::string> results;
  std::vector<SweepPoint> sweep;
  for (int64_t c : points) {
    int64_t n = o.dataset.num_prompts;
    if (!o.sweep.empty() && o.prompts_per_concurrency > 0) n = std::max(n, o.prompts_per_concurrency * c);
    if (!o.sweep.empty()) std::printf("concurrency %lld, %lld prompts\n", static_cast<long long>(c), static_cast<long long>(n));
    PointResult r = run_point(client, o, model, *counter, exact, c, n);
    if (r.json.empty()) return 2;
    results.push_back(std::move(r.json));
    sweep.push_back(r.point);
  }
  if (!o.sweep.empty()) {
    std::printf("%-12s %14s %14s %14s %14s\n", "concurrency", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms");
    for (const SweepPoint& p : sweep) {
      std::printf("%-12g %14.1f %14.1f %14.1f %14.2f\n", p.concurrency, p.output_throughput, p.ttft_p50_ms, p.ttft_p99_ms,
                  p.tpot_p50_ms);
    }
  }
  if (!o.plot.empty()) {
    Status s = write_file(o.plot, sweep_svg(model + " at " + o.url + " (" + o.dataset.name + ")", sweep));
    if (!s.ok()) return fail(s.message());
  }
  if (o.save || !o.result_filename.empty()) {
    std::string path = o.result_filename.empty() ? default_filename(o, model, o.sweep.empty() ? o.max_concurrency : 0)
                                                 : o.result_filename;
    if (!o.result_dir.empty()) path = o.result_dir + "/" + path;
    Status s = write_file(path, (o.sweep.empty() ? results.front() : sweep_json(results)) + "\n");
    if (!s.ok()) return fail(s.message());
    std::fprintf(stderr, "deepinfer: result written to %s\n", path.c_str());
  }
  return 0;
}

}  // namespace deepinfer::cli
