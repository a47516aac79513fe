// deepinfer router: the replica router (src/router/router.h) in front of `deepinfer serve`s.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "router/router.h"

namespace deepinfer::cli {

namespace {

const char* kRouterUsage = R"(usage: deepinfer router --replica URL [--replica URL ...] [options]
  --replica URL          a `deepinfer serve` replica (http://host:port), repeatable
  --decode URL           a decode worker (`serve --role decode`), repeatable; routed as replicas
  --prefill URL          a prefill worker (`serve --role prefill`), repeatable: a decode worker's
                         request whose uncached prompt is long enough is prefilled there first
                         (its KV pages reach the decode worker through their shared --kv-store)
  --pd-min-tokens N      remote prefill only when the decode worker is expected to miss at least
                         this many prompt tokens (default 256; estimated at 4 bytes a token)
  --config FILE          JSON object of these flags without their dashes, e.g.
                         {"replica": ["http://10.0.0.1:8000"], "policy": "least-load"};
                         flags on the command line win (replicas add up)
  --host HOST            address to listen on (default 127.0.0.1)
  --port PORT            port (default 8000; 0 = any free port)
  --policy NAME          cache-aware (default), least-load or round-robin
  --load-unit U          cache-aware: tokens (default) prices a replica by the uncached prompt
                         tokens it must compute before this request's first token (its pending
                         prefills, plus --decode-row-tokens per request decoding) and the
                         request's own miss; requests counts requests in flight against the
                         fraction of the prompt missed
  --decode-row-tokens T  tokens: what one decoding request adds to the work ahead (default 16)
  --load-weight W        cache-aware: weight of load against expected prefix misses (default 1)
  --balance-abs N        cache-aware bound: a replica more than N requests above the least
  --balance-rel R        loaded one and more than R times its load gets no affinity (8, 1.5)
  --max-in-flight N      requests in flight per replica; beyond, others or 503 (default 64; 0: none)
  --max-retries N        other replicas tried when one fails before the first byte (default 2)
  --request-timeout S    seconds a request may take on a replica, 504 after (default 600)
  --health-interval S    seconds between health checks of each replica (default 1)
  --eject-after N        failed checks in a row that eject a replica (default 2)
  --readmit-after N      good checks in a row that re-admit it (default 2)
  --index-blocks N       64-byte routing blocks remembered per replica (default 65536)
  --shutdown-timeout S   seconds requests in flight may take after SIGTERM (default 30)
)";

// The config file's entries as flags, placed before the command line's so that those win.
Result<std::vector<std::string>> config_flags(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("--config: cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return invalid_argument("--config " + path + ": expected a JSON object");
  std::vector<std::string> out;
  for (const auto& [key, value] : doc.items()) {
    const std::string flag = "--" + key;
    std::vector<nlohmann::json> values = value.is_array() ? value.get<std::vector<nlohmann::json>>() : std::vector{value};
    for (const auto& v : values) {
      if (!v.is_string() && !v.is_number()) {
        return invalid_argument("--config " + path + ": \"" + key + "\" must be a string, a number or a list of them");
      }
      out.push_back(flag);
      out.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
  return out;
}

Status read_options(const Args& args, router::RouterOptions& o) {
  o.replicas = args.get_all("--replica");
  o.decode = args.get_all("--decode");
  o.prefill = args.get_all("--prefill");
  if (o.replicas.empty() && o.decode.empty()) {
    return invalid_argument("--replica or --decode: at least one replica URL is needed");
  }
  if (!o.prefill.empty() && o.decode.empty()) {
    return invalid_argument("--prefill needs --decode workers: a prefill worker only computes prompts for them");
  }
  DI_ASSIGN_OR_RETURN(o.pd_min_tokens, args.get_int("--pd-min-tokens", o.pd_min_tokens));
  if (o.pd_min_tokens < 0) return invalid_argument("--pd-min-tokens must be >= 0");
  if (auto host = args.get("--host")) o.host = *host;
  DI_ASSIGN_OR_RETURN(int64_t port, args.get_int("--port", 8000));
  if (port < 0 || port > 65535) return invalid_argument("--port must be 0-65535");
  o.port = static_cast<uint16_t>(port);
  if (auto name = args.get("--policy")) {
    auto policy = router::parse_policy(*name);
    if (!policy) return invalid_argument("--policy: expected cache-aware, least-load or round-robin, got '" + *name + "'");
    o.policy = *policy;
  }
  if (auto name = args.get("--load-unit")) {
    auto unit = router::parse_load_unit(*name);
    if (!unit) return invalid_argument("--load-unit: expected tokens or requests, got '" + *name + "'");
    o.cost.load_unit = *unit;
  }
  DI_ASSIGN_OR_RETURN(o.cost.decode_row_tokens, args.get_float("--decode-row-tokens", o.cost.decode_row_tokens));
  if (o.cost.decode_row_tokens < 0) return invalid_argument("--decode-row-tokens must be >= 0");
  DI_ASSIGN_OR_RETURN(o.cost.load_weight, args.get_float("--load-weight", o.cost.load_weight));
  DI_ASSIGN_OR_RETURN(o.cost.balance_abs, args.get_float("--balance-abs", o.cost.balance_abs));
  DI_ASSIGN_OR_RETURN(o.cost.balance_rel, args.get_float("--balance-rel", o.cost.balance_rel));
  if (o.cost.load_weight < 0 || o.cost.balance_abs < 0 || o.cost.balance_rel < 1) {
    return invalid_argument("--load-weight and --balance-abs must be >= 0, --balance-rel >= 1");
  }
  DI_ASSIGN_OR_RETURN(o.replica.max_in_flight, args.get_int("--max-in-flight", o.replica.max_in_flight));
  DI_ASSIGN_OR_RETURN(int64_t retries, args.get_int("--max-retries", o.max_retries));
  DI_ASSIGN_OR_RETURN(int64_t eject, args.get_int("--eject-after", o.replica.eject_after));
  DI_ASSIGN_OR_RETURN(int64_t readmit, args.get_int("--readmit-after", o.replica.readmit_after));
  DI_ASSIGN_OR_RETURN(int64_t blocks, args.get_int("--index-blocks", static_cast<int64_t>(o.replica.index_blocks)));
  if (retries < 0 || retries > 16) return invalid_argument("--max-retries must be 0-16");
  if (eject < 1 || readmit < 1) return invalid_argument("--eject-after and --readmit-after must be >= 1");
  if (blocks < 1) return invalid_argument("--index-blocks must be >= 1");
  o.max_retries = static_cast<int>(retries);
  o.replica.eject_after = static_cast<int>(eject);
  o.replica.readmit_after = static_cast<int>(readmit);
  o.replica.index_blocks = static_cast<size_t>(blocks);
  auto seconds = [&](const char* flag, std::chrono::milliseconds& out) -> Status {
    DI_ASSIGN_OR_RETURN(double s, args.get_float(flag, std::chrono::duration<double>(out).count()));
    if (!(s > 0)) return invalid_argument(std::string(flag) + " must be > 0 seconds");
    out = std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
    return Status::ok_status();
  };
  DI_RETURN_IF_ERROR(seconds("--request-timeout", o.request_timeout));
  DI_RETURN_IF_ERROR(seconds("--health-interval", o.replica.health_interval));
  DI_RETURN_IF_ERROR(seconds("--shutdown-timeout", o.shutdown_timeout));
  o.replica.health_timeout = std::min(o.replica.health_interval, std::chrono::milliseconds(2000));
  return Status::ok_status();
}

}  // namespace

int router_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.takes_positional = false;
  spec.with_value = {"--replica", "--config", "--host", "--port", "--policy", "--load-unit", "--decode-row-tokens", "--load-weight", "--balance-abs",
                     "--balance-rel", "--max-in-flight", "--max-retries", "--request-timeout", "--health-interval",
                     "--eject-after", "--readmit-after", "--index-blocks", "--shutdown-timeout", "--decode", "--prefill",
                     "--pd-min-tokens"};
  spec.switches = {"--help"};
  spec.aliases = {{"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kRouterUsage, 2);
  if (parsed->has("--help")) {
    std::fputs(kRouterUsage, stdout);
    return 0;
  }
  if (auto config = parsed->get("--config")) {
    auto flags = config_flags(*config);
    if (!flags.ok()) return fail(flags.status().message(), 2);
    if (std::find(flags->begin(), flags->end(), "--config") != flags->end()) return fail("--config: a config cannot name another", 2);
    flags->insert(flags->end(), argv.begin(), argv.end());
    parsed = Args::parse(*flags, spec);
    if (!parsed.ok()) return fail("--config " + *config + ": " + parsed.status().message(), 2);
  }
  router::RouterOptions options;
  if (Status s = read_options(*parsed, options); !s.ok()) return fail(s.message() + "\n" + kRouterUsage, 2);
  if (Status s = router::run_router(options); !s.ok()) return fail(s.message());
  return 0;
}

}  // namespace deepinfer::cli
