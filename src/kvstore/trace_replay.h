// Trace replay: the hit rate of the KV-cache store on a request trace whose prompts are given as
// chains of block hash ids (Mooncake's FAST'25 traces: one id per 512-token block, equal ids for
// equal blocks), without a model. The real code decides every hit: a PageStore (its memory
// tier, its directory tier with the TTL and the capacity watermark, the trace's timestamps
// driving its injected clock) and, for comparison, the engine's in-process prefix cache
// (KvCacheManager over one BlockPool, LRU), at the same memory budget.
//
// Each full block of a request is split into pages of page_tokens tokens; a page's key is the
// engine's chain key (KvCacheManager::prefix_keys) over the request's pages, so it names the
// whole prefix even if the trace's ids did not (those of Mooncake's traces already do: each
// id has one parent). A page's payload is a few bytes: budgets are given in bytes of real KV
// (bytes_per_token x page_tokens per page) and turned into the same number of pages of the
// simulated size, so the store evicts exactly where a store of real pages would.
//
// Requests run one at a time in trace order, each finishing (its pages written) before the next
// one looks up: no overlap of running requests, no decoded tokens (a conversation's next turn
// brings its previous answer back as new ids), no write drops. A request's last token is always
// computed, as in the engine, so a page ending at it is never a hit; a partial last block is
// neither looked up nor stored.
//
// Modes, each a fresh cache replaying the whole trace:
//   prefix_cache         the in-process prefix cache alone (memory budget, LRU)
//   store_memory         the PageStore's memory tier alone (memory budget)
//   store_memory_disk    the PageStore's memory tier and directory tier (memory + disk budgets)
//   prefix_cache_store   what the engine does: the in-process prefix cache (memory budget)
//                        first, then the store's directory tier (disk budget) for the pages past
//                        its hit, imported into the cache; every full page the store does not
//                        list is written to it
//
// Single-threaded; the directory tier uses a scratch directory the caller names.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::kvstore {

struct TraceRequest {
  int64_t timestamp_ms = 0;        // arrival, from the trace's start; non-decreasing
  int64_t input_length = 0;        // prompt tokens
  std::vector<int64_t> hash_ids;   // one per block of block_tokens, the last one maybe partial
};

struct ReplayOptions {
  int64_t block_tokens = 512;      // tokens per hash id
  int64_t page_tokens = 512;       // store pages (and prefix-cache blocks): divides block_tokens
  int64_t bytes_per_token = 23040; // real KV bytes per token (SmolLM2-135M, f16)
  int64_t memory_bytes = 0;        // memory budget, bytes of real KV
  int64_t disk_bytes = 0;          // directory tier capacity, bytes of real KV
  std::chrono::seconds ttl = std::chrono::hours(72);  // the store's; 0: none
  double time_scale = 1.0;         // trace time x this = store time (stretches a short trace)
  std::string dir;                 // scratch directory for the directory tier (made, emptied)
};

struct ReplayModeResult {
  std::string mode;
  int64_t input_tokens = 0;
  int64_t hit_tokens = 0;          // prompt tokens served from a cache
  int64_t memory_hit_tokens = 0;   // of those: the prefix cache or the store's memory tier
  int64_t disk_hit_tokens = 0;     //           the store's directory tier
  int64_t pages_written = 0;       // to the directory tier
  int64_t bytes_written = 0;       // real KV bytes of those pages
  int64_t disk_bytes_read = 0;     // real KV bytes of the directory tier's hits
  int64_t memory_evictions = 0;    // pages (blocks) the memory budget pushed out
  int64_t disk_evictions = 0;      // pages the disk capacity watermark removed
  int64_t expirations = 0;         // pages the TTL removed
  int64_t write_failures = 0;      // puts the store refused (a full scratch disk)
  int64_t uncached_requests = 0;   // requests larger than the memory budget (prefix cache)
  double seconds = 0.0;            // wall time of this mode's replay
};

struct ReplayReport {
  int64_t requests = 0;
  int64_t input_tokens = 0;
  int64_t trace_ms = 0;            // last timestamp
  int64_t unique_ids = 0;
  int64_t ids_with_two_parents = 0;  // 0: the trace's ids already are prefix-unique
  int64_t page_bytes = 0;          // real KV bytes per page
  int64_t memory_pages = 0;        // the budgets, in pages
  int64_t disk_pages = 0;
  std::vector<ReplayModeResult> modes;
};

// INVALID_ARGUMENT naming the field: a negative length or id, or hash_ids that do not cover
// input_length in blocks of block_tokens.
Status validate_trace_request(const TraceRequest& r, int64_t block_tokens);

// Replays `trace` in every mode. INVALID_ARGUMENT for bad options or a bad request ("request
// N: ..."), UNAVAILABLE when the scratch directory cannot be used.
Result<ReplayReport> replay_trace(const std::vector<TraceRequest>& trace, const ReplayOptions& options);

}  // namespace deepinfer::kvstore
