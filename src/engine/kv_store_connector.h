// KvStoreConnector: the engine's side of the KV-cache store (src/kvstore), as a scheduler
// AdmissionHook. Owned by the engine; its calls come from the engine thread, its loader and
// writer threads only touch the store.
//
// A page is page_tokens tokens (a multiple of every prefix-cached group's block size) of every
// prefix-cached KV group, keyed by the prefix chain key (kv/block_hash.h) at its last base
// block, so a page names its whole prefix, the model fingerprint (weights, KV element type,
// backend layout) and the cache salt. Its payload: for each prefix-cached group in order, the
// group's blocks of those tokens in order, each as KvCache::read_block lays it out. Sliding-
// window groups are not stored: after a store hit the engine replays the last window (SWA
// bounded replay), as after an in-process hit.
//
// Admission: start_load() is asked about a request after the in-process prefix lookup; when
// the prompt has whole pages past the hit, the loader thread reads them (stopping at the first
// miss) and the request waits in kLoading while steps go on. take_loaded() imports the pages
// found into free, cached blocks (KvCacheManager::import_prefix); their KV bytes are copied
// into the KV memory by take_block_writes(), which the engine applies before the next forward
// pass (a pass in flight may still write blocks just freed, so the copy waits for it). The
// request is then admitted from the prefix cache: store hits count as cached tokens.
//
// Write-behind: on_computed() copies each newly complete page that the store does not list
// out of the KV memory (the blocks are published and no pass writes them again) and queues it
// for the writer thread; a full queue drops the page and counts it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "kvstore/page_loader.h"
#include "kvstore/page_store.h"
#include "kvstore/write_behind.h"

namespace deepinfer {

struct KvStoreConnectorConfig {
  int64_t page_tokens = 128;
  int64_t write_queue_bytes = int64_t{256} << 20;
};

struct KvStoreConnectorStats {
  int64_t load_requests = 0;   // admissions that looked pages up
  int64_t hit_pages = 0;       // pages loaded into the prefix cache
  int64_t miss_pages = 0;      // pages looked up and not found (or refused)
  int64_t hit_tokens = 0;      // tokens those hits added to the in-process prefix hit
  int64_t import_failures = 0; // loads found but not imported (the KV pool was short)
  int64_t pages_queued = 0;    // pages handed to the writer
  int64_t write_drops = 0;     // pages dropped because the write queue was full
  double load_seconds = 0.0;   // reading and verifying pages (loader thread)
};

class KvStoreConnector final : public AdmissionHook {
 public:
  // INVALID_ARGUMENT when page_tokens is not a positive multiple of every prefix-cached
  // group's block size.
  static Status validate(const KvStoreConnectorConfig& config, const kv::KvCacheConfig& kv);
  // `wake` is called from the loader thread when a load has finished (the engine thread may be
  // asleep with nothing else to do).
  KvStoreConnector(KvStoreConnectorConfig config, kvstore::PageStore& store, kv::KvCacheManager& kv,
                   backend::KvCache& kv_memory, std::function<void()> wake);
  ~KvStoreConnector() override;

  std::vector<RequestId> take_loaded() override;
  bool start_load(const Request& r, int64_t n_hit) override;
  void on_computed(const Request& r, int64_t n_computed) override;
  void on_finished(RequestId id) override;

  // One block's KV to copy into the KV memory before the next forward pass.
  struct BlockWrite {
    int group = 0;
    kv::BlockId block = 0;
    kvstore::Page page;  // keeps the bytes alive
    size_t offset = 0;   // into page.payload()
    size_t bytes = 0;
  };
  // The copies take_loaded() owes the KV memory; the caller applies them with apply().
  std::vector<BlockWrite> take_block_writes();
  Status apply(const std::vector<BlockWrite>& writes);

  // Waits until every queued page is written (tests, benchmarks, shutdown).
  void flush();
  KvStoreConnectorStats stats() const;
  kvstore::WriteBehindStats writer_stats() const { return writer_->stats(); }
  const kvstore::PageMeta& page_meta() const { return meta_; }

 private:
  struct Pending {
    std::vector<int32_t> tokens;  // the whole pages looked up, from the prompt's start
    std::string cache_salt;
    int64_t first_page = 0;
  };
  void on_load_done(kvstore::LoadResult result);
  // Byte offset of group g's logical block j within its page's payload.
  size_t page_offset(int g, int64_t j) const;

  KvStoreConnectorConfig config_;
  kvstore::PageStore& store_;
  kv::KvCacheManager& kv_;
  backend::KvCache& kv_memory_;
  std::function<void()> wake_;
  kvstore::PageMeta meta_;
  std::vector<size_t> group_offset_;  // [group] its first block's offset in a page; prefix-cached only
  size_t page_bytes_ = 0;
  int64_t base_per_page_ = 0;

  // Engine thread.
  std::unordered_map<RequestId, Pending> pending_;
  std::unordered_map<RequestId, int64_t> pages_published_;  // pages of each request handed on
  std::vector<BlockWrite> block_writes_;
  KvStoreConnectorStats stats_;  // guarded by mutex_ for readers on other threads

  // Shared with the loader thread.
  mutable std::mutex mutex_;
  std::vector<kvstore::LoadResult> done_;

  std::unique_ptr<kvstore::WriteBehind> writer_;
  std::unique_ptr<kvstore::PageLoader> loader_;  // last: its thread calls on_load_done
};

}  // namespace deepinfer
