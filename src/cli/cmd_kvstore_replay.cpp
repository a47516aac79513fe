// deepinfer kvstore replay-trace TRACE.jsonl: the store's hit rate on a request trace of block
// hash ids (Mooncake's format), without a model (kvstore/trace_replay.h). This file is the
// edge: it reads the JSONL, and the replay sees only TraceRequests.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "kvstore/trace_replay.h"

namespace deepinfer::cli {

namespace {

namespace fs = std::filesystem;

// A JSON integer that fits int64_t, or an error naming the field.
Result<int64_t> integer_field(const nlohmann::json& j, const std::string& name) {
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return invalid_argument("'" + name + "' is too large");
  }
  if (!j.is_number_integer()) return invalid_argument("'" + name + "' must be an integer");
  return j.get<int64_t>();
}

Result<kvstore::TraceRequest> parse_request(const std::string& line, int64_t block_tokens) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("not a JSON object");
  for (const char* field : {"timestamp", "input_length", "hash_ids"}) {
    if (!j.contains(field)) return invalid_argument(std::string("no '") + field + "'");
  }
  kvstore::TraceRequest r;
  const nlohmann::json& ts = j["timestamp"];
  if (ts.is_number_float()) {
    r.timestamp_ms = static_cast<int64_t>(ts.get<double>());  // some traces give fractions of a ms
  } else {
    DI_ASSIGN_OR_RETURN(r.timestamp_ms, integer_field(ts, "timestamp"));
  }
  DI_ASSIGN_OR_RETURN(r.input_length, integer_field(j["input_length"], "input_length"));
  const nlohmann::json& ids = j["hash_ids"];
  if (!ids.is_array()) return invalid_argument("'hash_ids' must be an array");
  r.hash_ids.reserve(ids.size());
  for (const nlohmann::json& id : ids) {
    DI_ASSIGN_OR_RETURN(const int64_t v, integer_field(id, "hash_ids"));
    r.hash_ids.push_back(v);
  }
  DI_RETURN_IF_ERROR(kvstore::validate_trace_request(r, block_tokens));
  return r;
}

// Every non-blank line of the file; errors say "PATH:LINE: why".
Result<std::vector<kvstore::TraceRequest>> read_trace(const std::string& path, int64_t block_tokens) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read the trace " + path);
  std::vector<kvstore::TraceRequest> trace;
  std::string line;
  int64_t last_ms = 0;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<kvstore::TraceRequest> r = parse_request(line, block_tokens);
    if (r.ok() && r->timestamp_ms < last_ms) r = invalid_argument("timestamp goes back in time");
    if (!r.ok()) {
      std::string m = path;
      m.append(":").append(std::to_string(n)).append(": ").append(r.status().message());
      return invalid_argument(m);
    }
    last_ms = r->timestamp_ms;
    trace.push_back(std::move(r).value());
  }
  if (trace.empty()) return invalid_argument("the trace " + path + " has no requests");
  return trace;
}

nlohmann::ordered_json mode_json(const kvstore::ReplayModeResult& m) {
  const double rate = m.input_tokens > 0 ? static_cast<double>(m.hit_tokens) / static_cast<double>(m.input_tokens) : 0;
  return {{"mode", m.mode},
          {"input_tokens", m.input_tokens},
          {"hit_tokens", m.hit_tokens},
          {"hit_rate", rate},
          {"memory_hit_tokens", m.memory_hit_tokens},
          {"disk_hit_tokens", m.disk_hit_tokens},
          {"pages_written", m.pages_written},
          {"bytes_written", m.bytes_written},
          {"disk_bytes_read", m.disk_bytes_read},
          {"memory_evictions", m.memory_evictions},
          {"disk_evictions", m.disk_evictions},
          {"expirations", m.expirations},
          {"write_failures", m.write_failures},
          {"uncached_requests", m.uncached_requests},
          {"seconds", m.seconds}};
}

Status parse_replay_flags(const Args& args, kvstore::ReplayOptions& o) {
  DI_ASSIGN_OR_RETURN(o.block_tokens, args.get_int("--block-tokens", o.block_tokens));
  DI_ASSIGN_OR_RETURN(o.page_tokens, args.get_int("--page-tokens", o.page_tokens));
  DI_ASSIGN_OR_RETURN(o.bytes_per_token, args.get_int("--bytes-per-token", o.bytes_per_token));
  DI_ASSIGN_OR_RETURN(o.time_scale, args.get_float("--time-scale", o.time_scale));
  const auto size = [&](const char* flag, const char* fallback, int64_t* out) -> Status {
    auto bytes = parse_byte_size(args.get(flag).value_or(fallback));
    if (!bytes.ok()) return invalid_argument(std::string(flag) + ": " + bytes.status().message());
    *out = *bytes;
    return {};
  };
  DI_RETURN_IF_ERROR(size("--memory", "64G", &o.memory_bytes));
  DI_RETURN_IF_ERROR(size("--disk", "0", &o.disk_bytes));
  if (auto ttl = args.get("--ttl")) {
    auto seconds = parse_duration_seconds(*ttl);
    if (!seconds.ok()) return invalid_argument("--ttl: " + seconds.status().message());
    o.ttl = std::chrono::seconds(*seconds);
  }
  return {};
}

}  // namespace

int kvstore_replay_command(const std::string& trace_path, const Args& args) {
  kvstore::ReplayOptions o;
  if (Status s = parse_replay_flags(args, o); !s.ok()) return fail(s.message(), 2);
  auto trace = read_trace(trace_path, o.block_tokens);
  if (!trace.ok()) return fail(trace.status().message(), 2);
  // The disk tier's pages are tiny stand-ins, but each is a file fsynced twice: a tmpfs
  // (TMPDIR=/dev/shm) keeps a long trace from waiting on the disk.
  const bool own_dir = !args.get("--dir").has_value();
  o.dir = own_dir ? (fs::temp_directory_path() / ("deepinfer-replay-" + std::to_string(::getpid()))).string()
                  : *args.get("--dir");
  auto report = kvstore::replay_trace(*trace, o);
  std::error_code ec;
  if (own_dir) fs::remove_all(o.dir, ec);
  if (!report.ok()) return fail(report.status().message(), report.status().code() == StatusCode::kInvalidArgument ? 2 : 1);
  const kvstore::ReplayReport& r = *report;
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  for (const kvstore::ReplayModeResult& m : r.modes) modes.push_back(mode_json(m));
  const nlohmann::ordered_json out = {
      {"trace", trace_path},          {"requests", r.requests},
      {"input_tokens", r.input_tokens}, {"trace_seconds", static_cast<double>(r.trace_ms) / 1000.0},
      {"unique_ids", r.unique_ids},   {"ids_with_two_parents", r.ids_with_two_parents},
      {"block_tokens", o.block_tokens}, {"page_tokens", o.page_tokens},
      {"bytes_per_token", o.bytes_per_token}, {"page_bytes", r.page_bytes},
      {"memory_bytes", o.memory_bytes}, {"memory_pages", r.memory_pages},
      {"disk_bytes", o.disk_bytes},   {"disk_pages", r.disk_pages},
      {"ttl_seconds", o.ttl.count()}, {"time_scale", o.time_scale},
      {"modes", modes}};
  std::puts(out.dump().c_str());
  return 0;
}

}  // namespace deepinfer::cli
