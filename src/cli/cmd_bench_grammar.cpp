// deepinfer bench grammar: the structured-output engine over MaskBench-format files, measured as
// MaskBench measures (one thread per schema, CPU only).
//
// Each file is {"description", "meta", "schema", "tests": [{"data", "valid"}]}. The schema is
// compiled (TTFM: compile plus the first mask); each test's data is serialized as compact JSON,
// tokenized without BOS and walked token by token: a TBM sample times one mask plus checking and
// consuming the token (and, at the end, the mask that must allow end-of-sequence). A valid
// instance must pass every token and the end; an invalid one must be refused somewhere.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "model/catalog.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::cli {

namespace {

const char* kUsage = R"(usage: deepinfer bench grammar --data DIR [--tokenizer MODEL] [--threads N] [--jsonl OUT] [--limit N]
  Compiles the JSON Schema of every *.json file of DIR (MaskBench format: {"schema", "tests":
  [{"data", "valid"}]}) and walks each test's compact serialization token by token, timing every
  mask. One JSON line per schema (to --jsonl OUT, else stdout) with exactly: file, compiled,
  error, valid_accepted, valid_total, invalid_rejected, invalid_total, ttfm_us, tbm_p50_us,
  tbm_p99_us, tbm_max_us, n_masks, tbm_us; then a summary line {"summary": {...}} on stdout.
  --tokenizer MODEL   whose vocabulary (a model name, GGUF file or tokenizer; default: the
                      default model)
  --threads N         schemas measured at once, one thread each (default 1)
  --limit N           only the first N files (sorted by name)
  --compact           no whitespace between JSON tokens (default: up to 8 bytes at each place)
)";

using Clock = std::chrono::steady_clock;
// Ordered: instances keep their keys in file order (the schemas declare properties in order, and
// a sorted dump turned valid instances into out-of-order ones for every engine).
using Json = nlohmann::ordered_json;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) ;
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

struct SchemaResult {
  std::string file;
  bool compiled = false;
  std::string error;
  int valid_accepted = 0, valid_total = 0, invalid_rejected = 0, invalid_total = 0;
  double ttfm_us = 0.0;
  std::vector<double> tbm_us;

  bool passing() const { return compiled && valid_accepted == valid_total && invalid_rejected == invalid_total; }

  Json to_json() const {
    Json out;
    out["file"] = file;
    out["compiled"] = compiled;
    out["error"] = compiled ? Json(nullptr) : Json(error);
    out["valid_accepted"] = valid_accepted;
    out["valid_total"] = valid_total;
    out["invalid_rejected"] = invalid_rejected;
    out["invalid_total"] = invalid_total;
    out["ttfm_us"] = ttfm_us;
    out["tbm_p50_us"] = percentile(tbm_us, 50);
    out["tbm_p99_us"] = percentile(tbm_us, 99);
    out["tbm_max_us"] = tbm_us.empty() ? 0.0 : *std::max_element(tbm_us.begin(), tbm_us.end());
    out["n_masks"] = tbm_us.size();
    Json samples = Json::array();
    for (double t : tbm_us) samples.push_back(std::round(t * 1000.0) / 1000.0);
    out["tbm_us"] = std::move(samples);
    return out;
  }
};

// One instance: true when every token and the end were allowed.
bool walk_instance(const grammar::CompiledGrammar& compiled, const std::shared_ptr<const grammar::CompiledGrammar>& ptr,
                   const std::vector<int32_t>& ids, std::vector<uint64_t>& mask, std::vector<double>* tbm) {
  grammar::Matcher matcher(ptr);
  const int32_t stop = compiled.tokens().stop_ids().empty() ? -1 : compiled.tokens().stop_ids()[0];
  for (size_t i = 0; i <= ids.size(); ++i) {
    const Clock::time_point t = Clock::now();
    matcher.fill_mask(mask);
    const int32_t next = i < ids.size() ? ids[i] : stop;
    const bool allowed = next >= 0 && grammar::mask_has(mask, next) && matcher.accept_token(next);
    tbm->push_back(us_since(t));
    if (!allowed) return false;
  }
  return true;
}

SchemaResult run_file(const std::filesystem::path& path, const Tokenizer& tokenizer,
                      const std::shared_ptr<const grammar::TokenIndex>& tokens, const grammar::JsonSchemaOptions& json) {
  SchemaResult r;
  r.file = path.filename().string();
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const Json doc = Json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("schema") || !doc.contains("tests")) {
    r.error = "not a MaskBench file (no schema or tests)";
    return r;
  }
  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarKind::kJsonSchema;
  spec.text = doc["schema"].dump();
  spec.json = json;
  std::vector<uint64_t> mask(tokens->n_words());
  const Clock::time_point t0 = Clock::now();
  auto compiled = grammar::compile_grammar(spec, tokens, {});
  if (!compiled.ok()) {
    r.error = compiled.status().message();
    return r;
  }
  {
    grammar::Matcher first(*compiled);
    first.fill_mask(mask);
  }
  r.ttfm_us = us_since(t0);
  r.compiled = true;
  for (const Json& test : doc["tests"]) {
    const bool valid = test.value("valid", false);
    const std::vector<int32_t> ids = tokenizer.encode(test["data"].dump(), {});
    const bool accepted = walk_instance(**compiled, *compiled, ids, mask, &r.tbm_us);
    if (valid) {
      ++r.valid_total;
      r.valid_accepted += accepted;
    } else {
      ++r.invalid_total;
      r.invalid_rejected += !accepted;
    }
  }
  return r;
}

Json summarize(const std::vector<SchemaResult>& results) {
  int compiled = 0, passing = 0, va = 0, vt = 0, ir = 0, it = 0;
  std::vector<double> tbm, ttfm;
  std::map<std::string, int> errors;
  for (const SchemaResult& r : results) {
    if (!r.compiled) {
      // The part of the message before " at /...": the keyword or construct.
      ++errors[r.error.substr(0, r.error.find(" at /"))];
      continue;
    }
    ++compiled;
    passing += r.passing();
    va += r.valid_accepted, vt += r.valid_total, ir += r.invalid_rejected, it += r.invalid_total;
    tbm.insert(tbm.end(), r.tbm_us.begin(), r.tbm_us.end());
    ttfm.push_back(r.ttfm_us);
  }
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [msg, n] : errors) top.emplace_back(n, msg);
  std::sort(top.rbegin(), top.rend());
  Json errs = Json::array();
  for (size_t i = 0; i < std::min<size_t>(top.size(), 12); ++i) errs.push_back({{"count", top[i].first}, {"error", top[i].second}});
  double mean = 0.0;
  for (double t : tbm) mean += t;
  Json s;
  s["schemas"] = results.size();
  s["compiled"] = compiled;
  s["passing"] = passing;
  s["valid_accepted"] = va;
  s["valid_total"] = vt;
  s["invalid_rejected"] = ir;
  s["invalid_total"] = it;
  s["invalid_accepted"] = it - ir;
  s["n_masks"] = tbm.size();
  s["tbm_mean_us"] = tbm.empty() ? 0.0 : mean / static_cast<double>(tbm.size());
  s["tbm_p50_us"] = percentile(tbm, 50);
  s["tbm_p99_us"] = percentile(tbm, 99);
  s["tbm_p999_us"] = percentile(tbm, 99.9);
  s["tbm_max_us"] = tbm.empty() ? 0.0 : *std::max_element(tbm.begin(), tbm.end());
  s["ttfm_p50_us"] = percentile(ttfm, 50);
  s["ttfm_p99_us"] = percentile(ttfm, 99);
  s["top_errors"] = std::move(errs);
  return Json{{"summary", s}};
}

Result<std::shared_ptr<const Tokenizer>> load_vocab(const Args& args) {
  const std::string name = args.get("--tokenizer").value_or(std::string(kDefaultModelName));
  auto path = resolve_model_path(name);
  return load_tokenizer(path.ok() ? *path : name, TokenizerPresence::kRequired);
}

}  // namespace

int bench_grammar_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--data", "--tokenizer", "--threads", "--jsonl", "--limit"};
  spec.switches = {"--compact", "--help"};
  spec.aliases = {{"-t", "--threads"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const auto data = args.get("--data");
  if (!data) return fail(std::string("--data DIR is required\n") + kUsage, 2);
  auto threads = args.get_int("--threads", 1);
  auto limit = args.get_int("--limit", 0);
  if (!threads.ok() || *threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);
  if (!limit.ok() || *limit < 0) return fail("--limit must be >= 0", 2);
  std::error_code ec;
  if (!std::filesystem::is_directory(*data, ec)) return fail("--data: '" + *data + "' is not a directory", 2);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(*data, ec)) {
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (*limit > 0 && files.size() > static_cast<size_t>(*limit)) files.resize(*limit);
  if (files.empty()) return fail("--data: no *.json files in '" + *data + "'", 2);
  auto tokenizer = load_vocab(args);
  if (!tokenizer.ok()) return fail(tokenizer.status().to_string());
  const auto tokens = grammar::TokenIndex::build(**tokenizer);
  grammar::JsonSchemaOptions json;
  json.compact = args.has("--compact");

  std::FILE* out = stdout;
  if (auto path = args.get("--jsonl")) {
    out = std::fopen(path->c_str(), "w");
    if (!out) return fail("--jsonl: cannot write '" + *path + "'");
  }
  std::vector<SchemaResult> results(files.size());
  std::atomic<size_t> next{0};
  std::mutex write_mutex;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      results[i] = run_file(files[i], **tokenizer, tokens, json);
      const std::string line = results[i].to_json().dump();
      std::lock_guard<std::mutex> lock(write_mutex);
      std::fprintf(out, "%s\n", line.c_str());
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < *threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  if (out != stdout) std::fclose(out);
  std::printf("%s\n", summarize(results).dump().c_str());
  return 0;
}

}  // namespace deepinfer::cli
