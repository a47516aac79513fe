#include "kvstore/trace_replay.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include "kv/kv_cache_manager.h"
#include "kvstore/page_store.h"

namespace deepinfer::kvstore {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kFingerprint = "trace-replay";
constexpr size_t kSimPayloadBytes = 64;  // a simulated page's payload: budgets count pages
constexpr int32_t kNoUnit = -1;          // stands for the last token, which is never looked up

// The trace turned into what the caches see: per request, one "token" per page (a dense id per
// (hash id, page within its block)), the pages it may hit and the pages it stores, and their keys.
struct Prepared {
  std::vector<std::vector<int32_t>> units;  // n_pages entries, then kNoUnit
  std::vector<int64_t> n_pages;             // pages of the request's full blocks
  std::vector<int64_t> n_lookup;            // of those, the ones that end before its last token
  std::vector<std::vector<PageKey>> keys;   // the chain key of each page
  std::vector<int64_t> clock_ns;            // the store's time at the request's arrival
};

struct Budgets {
  int64_t page_bytes = 0, memory_pages = 0, disk_pages = 0;
};

Status validate_options(const ReplayOptions& o) {
  if (o.block_tokens < 1) return invalid_argument("block tokens must be positive");
  if (o.page_tokens < 1 || o.block_tokens % o.page_tokens != 0) {
    return invalid_argument("page tokens (" + std::to_string(o.page_tokens) + ") must divide the trace's block of " +
                            std::to_string(o.block_tokens) + " tokens");
  }
  if (o.bytes_per_token < 1) return invalid_argument("bytes per token must be positive");
  if (o.memory_bytes < 0 || o.disk_bytes < 0) return invalid_argument("budgets must not be negative");
  if (!(o.time_scale > 0.0) || !std::isfinite(o.time_scale)) return invalid_argument("time scale must be positive");
  if (o.ttl.count() < 0) return invalid_argument("TTL must not be negative");
  if (o.dir.empty()) return invalid_argument("the replay needs a scratch directory for the disk tier");
  const int64_t page_bytes = o.page_tokens * o.bytes_per_token;
  if ((o.memory_bytes > 0 && o.memory_bytes < page_bytes) || (o.disk_bytes > 0 && o.disk_bytes < page_bytes)) {
    return invalid_argument("a budget is smaller than one page of " + std::to_string(page_bytes) + " bytes");
  }
  return {};
}

Result<Prepared> prepare(const std::vector<TraceRequest>& trace, const ReplayOptions& o, ReplayReport& report) {
  Prepared p;
  const int64_t per_block = o.block_tokens / o.page_tokens;
  const kv::KvCacheManager keys(kv::single_group_config(1, 0, kFingerprint));  // the engine's chain keys
  std::unordered_map<int64_t, int32_t> dense;     // hash id -> first page's unit / per_block
  std::unordered_map<int64_t, int64_t> parent;    // hash id -> the id before it (-1: first)
  const int64_t t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  int64_t last_ms = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& r = trace[i];
    const std::string where = "request " + std::to_string(i) + ": ";
    if (Status s = validate_trace_request(r, o.block_tokens); !s.ok()) return invalid_argument(where + s.message());
    if (r.timestamp_ms < last_ms) return invalid_argument(where + "timestamp goes back in time");
    last_ms = r.timestamp_ms;
    const int64_t n_full = r.input_length / o.block_tokens;
    std::vector<int32_t> units;
    units.reserve(static_cast<size_t>(n_full * per_block + 1));
    for (size_t b = 0; b < r.hash_ids.size(); ++b) {
      const int64_t id = r.hash_ids[b], before = b == 0 ? -1 : r.hash_ids[b - 1];
      auto [pos, fresh] = parent.emplace(id, before);
      if (!fresh && pos->second != before && pos->second != -2) {
        ++report.ids_with_two_parents;
        pos->second = -2;  // counted once
      }
      if (static_cast<int64_t>(b) >= n_full) continue;
      auto [d, added] = dense.emplace(id, static_cast<int32_t>(dense.size()));
      if (dense.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / per_block)) {
        return invalid_argument("the trace has too many distinct blocks to replay");
      }
      for (int64_t k = 0; k < per_block; ++k) units.push_back(static_cast<int32_t>(d->second * per_block + k));
    }
    const auto n_pages = static_cast<int64_t>(units.size());
    units.push_back(kNoUnit);
    p.keys.push_back(keys.prefix_keys(units, "", n_pages));
    p.units.push_back(std::move(units));
    p.n_pages.push_back(n_pages);
    p.n_lookup.push_back(std::min(n_pages, (r.input_length - 1) / o.page_tokens));
    p.clock_ns.push_back(t0 + std::llround(static_cast<double>(r.timestamp_ms) * 1e6 * o.time_scale));
    report.input_tokens += r.input_length;
  }
  report.requests = static_cast<int64_t>(trace.size());
  report.trace_ms = last_ms;
  report.unique_ids = static_cast<int64_t>(parent.size());
  return p;
}

// ---- The in-process prefix cache ----

kv::KvCacheManager make_prefix_cache(const Budgets& b) {
  return kv::KvCacheManager(kv::single_group_config(1, b.memory_pages, kFingerprint));
}

// The request's pages that may be hit, followed by one it never may (the last token).
std::span<const int32_t> lookup_span(const Prepared& p, size_t i) {
  return std::span<const int32_t>(p.units[i]).first(static_cast<size_t>(p.n_lookup[i] + 1));
}

// Computes the rest of request i and publishes its full pages, as a finished request does.
// False when its pages do not fit the memory budget: an engine could not run it.
bool finish_in_prefix_cache(kv::KvCacheManager& kv, const Prepared& p, size_t i, const kv::PrefixHit& hit,
                            ReplayModeResult& out) {
  const int64_t n_pages = p.n_pages[i];
  if (n_pages == 0) return true;
  if (!kv.allocate_slots(i, n_pages, &hit)) {
    ++out.uncached_requests;
    return false;
  }
  kv.cache_full_blocks(i, std::span<const int32_t>(p.units[i]).first(static_cast<size_t>(n_pages)), n_pages, "");
  kv.free(i);
  return true;
}

ReplayModeResult replay_prefix_cache(const Prepared& p, const Budgets& b, int64_t page_tokens) {
  ReplayModeResult out;
  out.mode = "prefix_cache";
  kv::KvCacheManager kv = make_prefix_cache(b);
  for (size_t i = 0; i < p.units.size(); ++i) {
    const kv::PrefixHit hit = kv.find_cached_prefix(lookup_span(p, i), "");
    out.memory_hit_tokens += hit.n_tokens * page_tokens;
    finish_in_prefix_cache(kv, p, i, hit, out);
  }
  out.memory_evictions = kv.stats().pool.n_evicted;
  return out;
}

// ---- The store ----

struct StoreRun {
  std::unique_ptr<PageStore> store;
  int64_t now_ns = 0;  // the injected clock
  PageMeta meta;
  std::shared_ptr<const std::vector<uint8_t>> payload;
};

Result<std::unique_ptr<StoreRun>> open_store(const ReplayOptions& o, const Budgets& b, const std::string& dir,
                                             bool memory_tier, bool disk_tier) {
  auto run = std::make_unique<StoreRun>();
  run->meta = PageMeta{kFingerprint, "replay", o.page_tokens};
  run->payload = std::make_shared<const std::vector<uint8_t>>(kSimPayloadBytes, uint8_t{0});
  PageStoreOptions so;
  so.ttl = o.ttl;
  so.clock = [r = run.get()] { return r->now_ns; };
  if (memory_tier) so.memory_bytes = b.memory_pages * static_cast<int64_t>(kSimPayloadBytes);
  if (disk_tier) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) return unavailable("cannot empty the replay's scratch directory " + dir + ": " + ec.message());
    so.dir = dir;
    const auto file_bytes = static_cast<int64_t>(encode_page(PageKey{}, run->meta, *run->payload).size());
    so.capacity_bytes = b.disk_pages * file_bytes;  // every page has the same size
  }
  DI_ASSIGN_OR_RETURN(run->store, PageStore::open(std::move(so)));
  return run;
}

// Gets pages [from, to) of request i in order up to the first miss; returns how many it found.
int64_t get_pages(StoreRun& s, const Prepared& p, size_t i, int64_t from, int64_t to, int64_t page_tokens,
                  ReplayModeResult& out) {
  int64_t found = 0;
  for (int64_t j = from; j < to; ++j) {
    Result<Page> page = s.store->get(p.keys[i][static_cast<size_t>(j)], s.meta);
    if (!page.ok()) break;
    (page->from_memory ? out.memory_hit_tokens : out.disk_hit_tokens) += page_tokens;
    ++found;
  }
  return found;
}

void put_page(StoreRun& s, const Prepared& p, size_t i, int64_t j) {
  // A failed put is counted by the store (write_failures), and the replay goes on as a
  // request would.
  (void)s.store->put(p.keys[i][static_cast<size_t>(j)], s.meta, s.payload);
}

void read_store_stats(const StoreRun& s, const Budgets& b, ReplayModeResult& out) {
  const PageStoreStats st = s.store->stats();
  out.pages_written = st.pages_written;
  out.bytes_written = st.pages_written * b.page_bytes;
  out.memory_evictions = st.memory_evictions;
  out.disk_evictions = st.evictions;
  out.expirations = st.expirations;
  out.write_failures = st.write_failures;
}

Result<ReplayModeResult> replay_store(const Prepared& p, const ReplayOptions& o, const Budgets& b, bool disk_tier) {
  ReplayModeResult out;
  out.mode = disk_tier ? "store_memory_disk" : "store_memory";
  DI_ASSIGN_OR_RETURN(auto s, open_store(o, b, o.dir + "/" + out.mode, /*memory_tier=*/true, disk_tier));
  for (size_t i = 0; i < p.units.size(); ++i) {
    s->now_ns = p.clock_ns[i];
    const int64_t n_hit = get_pages(*s, p, i, 0, p.n_lookup[i], o.page_tokens, out);
    for (int64_t j = n_hit; j < p.n_pages[i]; ++j) put_page(*s, p, i, j);
  }
  read_store_stats(*s, b, out);
  out.disk_bytes_read = out.disk_hit_tokens * o.bytes_per_token;
  return out;
}

Result<ReplayModeResult> replay_prefix_cache_store(const Prepared& p, const ReplayOptions& o, const Budgets& b) {
  ReplayModeResult out;
  out.mode = "prefix_cache_store";
  DI_ASSIGN_OR_RETURN(auto s, open_store(o, b, o.dir + "/" + out.mode, /*memory_tier=*/false, /*disk_tier=*/true));
  kv::KvCacheManager kv = make_prefix_cache(b);
  const auto fill = [](int, int64_t, kv::BlockId) { return true; };  // no KV bytes to copy
  for (size_t i = 0; i < p.units.size(); ++i) {
    s->now_ns = p.clock_ns[i];
    const std::span<const int32_t> lookup = lookup_span(p, i);
    const int64_t n_hit = kv.find_cached_prefix(lookup, "").n_tokens;
    ReplayModeResult found_out;  // get_pages' attribution: the store has no memory tier here
    const int64_t n_found = get_pages(*s, p, i, n_hit, p.n_lookup[i], o.page_tokens, found_out);
    const int64_t n_imported =
        n_found > 0 && kv.import_prefix(lookup, "", n_hit, n_hit + n_found, fill) == n_hit + n_found ? n_found : 0;
    const kv::PrefixHit hit = kv.peek_cached_prefix(lookup, "");
    out.disk_hit_tokens += n_imported * o.page_tokens;
    out.memory_hit_tokens += (hit.n_tokens - n_imported) * o.page_tokens;
    out.disk_bytes_read += n_found * b.page_bytes;
    if (!finish_in_prefix_cache(kv, p, i, hit, out)) continue;
    for (int64_t j = 0; j < p.n_pages[i]; ++j) {
      if (!s->store->contains(p.keys[i][static_cast<size_t>(j)])) put_page(*s, p, i, j);
    }
  }
  read_store_stats(*s, b, out);
  out.memory_evictions = kv.stats().pool.n_evicted;  // the prefix cache is this mode's memory
  return out;
}

}  // namespace

Status validate_trace_request(const TraceRequest& r, int64_t block_tokens) {
  if (r.timestamp_ms < 0) return invalid_argument("timestamp is negative");
  if (r.input_length < 1) return invalid_argument("input_length must be at least 1");
  const int64_t n_blocks = (r.input_length + block_tokens - 1) / block_tokens;
  if (static_cast<int64_t>(r.hash_ids.size()) != n_blocks) {
    return invalid_argument("hash_ids has " + std::to_string(r.hash_ids.size()) + " ids, but input_length " +
                            std::to_string(r.input_length) + " is " + std::to_string(n_blocks) + " blocks of " +
                            std::to_string(block_tokens) + " tokens");
  }
  for (size_t b = 0; b < r.hash_ids.size(); ++b) {
    if (r.hash_ids[b] < 0) return invalid_argument("hash_ids[" + std::to_string(b) + "] is negative");
  }
  return {};
}

Result<ReplayReport> replay_trace(const std::vector<TraceRequest>& trace, const ReplayOptions& options) {
  DI_RETURN_IF_ERROR(validate_options(options));
  ReplayReport report;
  DI_ASSIGN_OR_RETURN(const Prepared p, prepare(trace, options, report));
  Budgets b;
  b.page_bytes = options.page_tokens * options.bytes_per_token;
  b.memory_pages = options.memory_bytes / b.page_bytes;
  b.disk_pages = options.disk_bytes / b.page_bytes;
  report.page_bytes = b.page_bytes;
  report.memory_pages = b.memory_pages;
  report.disk_pages = b.disk_pages;
  const auto timed = [&](auto&& run) -> Status {
    const auto t0 = Clock::now();
    Result<ReplayModeResult> r = run();
    if (!r.ok()) return r.status();
    r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r->input_tokens = report.input_tokens;
    r->hit_tokens = r->memory_hit_tokens + r->disk_hit_tokens;
    report.modes.push_back(std::move(r).value());
    return {};
  };
  DI_RETURN_IF_ERROR(timed([&]() -> Result<ReplayModeResult> { return replay_prefix_cache(p, b, options.page_tokens); }));
  DI_RETURN_IF_ERROR(timed([&] { return replay_store(p, options, b, /*disk_tier=*/false); }));
  DI_RETURN_IF_ERROR(timed([&] { return replay_store(p, options, b, /*disk_tier=*/true); }));
  DI_RETURN_IF_ERROR(timed([&] { return replay_prefix_cache_store(p, options, b); }));
  std::error_code ec;
  fs::remove_all(options.dir + "/store_memory_disk", ec);
  fs::remove_all(options.dir + "/prefix_cache_store", ec);
  return report;
}

}  // namespace deepinfer::kvstore
