// deepinfer kvstore stat|verify|gc DIR: the KV-cache store's directory, for operators.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "kvstore/page_store.h"
#include "kvstore/store_admin.h"

namespace deepinfer::cli {

int kvstore_bench_command(const std::string& dir, const Args& args);  // cmd_kvstore_bench.cpp
int kvstore_replay_command(const std::string& trace_path, const Args& args);  // cmd_kvstore_replay.cpp

namespace {

const char* kKvstoreUsage = R"(usage: deepinfer kvstore stat DIR
       deepinfer kvstore verify [--remove] DIR
       deepinfer kvstore gc [--ttl DURATION] [--capacity BYTES] DIR
       deepinfer kvstore bench [--pages N] [--page-bytes BYTES] [--index-pages N] DIR
       deepinfer kvstore replay-trace [--memory BYTES] [--disk BYTES] [--bytes-per-token N]
                 [--page-tokens N] [--block-tokens N] [--ttl DURATION] [--time-scale X]
                 [--dir SCRATCH] TRACE.jsonl
  The KV-cache store in DIR (what `serve --kv-store DIR` writes; docs/kv-store.md), as JSON.
  stat     pages, bytes, models (by fingerprint), pages by time since last use, index time
  verify   reads every page and checks its checksum and header; exit 1 when one fails
           (--remove deletes those)
  gc       applies the TTL (default 72h; 0: none) and the capacity watermark (default none:
           LRU eviction down to 90% of it) now
  bench    page put and get GB/s beside raw sequential write and read of as many bytes in DIR
           (default 64 pages of 2949120 bytes, SmolLM2's 128 tokens); --index-pages N also
           times the index rebuild of N small pages. Leaves DIR as it was.
  replay-trace  hit rate on a trace of block hash ids (Mooncake's JSONL: timestamp in ms,
           input_length, hash_ids of --block-tokens 512), without a model, through the real
           prefix cache and store: the in-process prefix cache alone, the store's memory tier,
           memory + disk tiers, and the engine's prefix cache + the store's disk, all with
           --memory (default 64G) of real KV and --disk (default 0: unlimited), pages of
           --page-tokens (default 512) at --bytes-per-token (default 23040, SmolLM2-135M f16).
           Trace time x --time-scale drives the store's clock (--ttl, default 72h). The disk
           tier lives in SCRATCH (default a temporary directory; a tmpfs is faster).
)";

nlohmann::ordered_json summary_json(const kvstore::StoreSummary& s) {
  nlohmann::ordered_json ages = nlohmann::ordered_json::object();
  for (size_t i = 0; i < s.age_histogram.size(); ++i) ages[kvstore::kAgeBuckets[i]] = s.age_histogram[i];
  return {{"pages", s.pages}, {"bytes", s.bytes}, {"unreadable", s.unreadable}, {"models", s.models},
          {"since_last_use", ages}, {"index_seconds", s.index_seconds}};
}

}  // namespace

int kvstore_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--ttl",    "--capacity",        "--pages",       "--page-bytes",   "--index-pages", "--memory",
                     "--disk",   "--bytes-per-token", "--page-tokens", "--block-tokens", "--time-scale",  "--dir"};
  spec.switches = {"--remove", "--help"};
  spec.aliases = {{"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kKvstoreUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kKvstoreUsage, stdout);
    return 0;
  }
  if (args.positional().size() != 2) {
    return fail(std::string("expected a subcommand and DIR (or TRACE)\n") + kKvstoreUsage, 2);
  }
  const std::string& sub = args.positional()[0];
  if (sub == "bench") return kvstore_bench_command(args.positional()[1], args);
  if (sub == "replay-trace") return kvstore_replay_command(args.positional()[1], args);
  if (sub != "stat" && sub != "verify" && sub != "gc") {
    return fail("unknown kvstore subcommand '" + sub + "'\n" + kKvstoreUsage, 2);
  }
  kvstore::PageStoreOptions options;
  options.dir = args.positional()[1];
  options.ttl = std::chrono::hours(72);
  if (auto ttl = args.get("--ttl")) {
    auto seconds = parse_duration_seconds(*ttl);
    if (!seconds.ok()) return fail("--ttl: " + seconds.status().message(), 2);
    options.ttl = std::chrono::seconds(*seconds);
  }
  if (auto capacity = args.get("--capacity")) {
    auto bytes = parse_byte_size(*capacity);
    if (!bytes.ok()) return fail("--capacity: " + bytes.status().message(), 2);
    options.capacity_bytes = *bytes;
  }
  auto store = kvstore::PageStore::open(std::move(options));
  if (!store.ok()) return fail(store.status().message());
  if (sub == "stat") {
    std::puts(summary_json(kvstore::summarize(**store)).dump().c_str());
    return 0;
  }
  if (sub == "verify") {
    const kvstore::VerifyReport r = kvstore::verify(**store, args.has("--remove"));
    const nlohmann::json j = {{"pages", r.pages}, {"ok", r.ok}, {"bad", r.bad}, {"removed", r.removed}};
    std::puts(j.dump().c_str());
    return r.bad.empty() ? 0 : 1;
  }
  const kvstore::GcReport r = (*store)->gc();
  const kvstore::PageStoreStats s = (*store)->stats();
  const nlohmann::json j = {{"expired", r.expired}, {"evicted", r.evicted}, {"bytes_freed", r.bytes_freed},
                            {"pages", s.pages}, {"bytes", s.bytes}};
  std::puts(j.dump().c_str());
  return 0;
}

}  // namespace deepinfer::cli
