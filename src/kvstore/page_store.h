// PageStore: KV-cache pages keyed by prefix chain hash, in two tiers: process memory (a byte
// budget), then a directory on any POSIX filesystem (a local SSD, or 3FS, CephFS, NFS, Lustre
// shared by several processes and hosts: there is no server, the directory is the store).
//
// Layout (docs/kv-store.md): DIR/pages/<first two hex digits of the key>/<key hex>.page, each a
// page_file.h file. A page is written to a temporary file in the same folder (a name no other
// writer uses), fsynced, given its last-use time as mtime, renamed into place and the folder
// fsynced: a reader sees the old state or a complete page, never a torn one, and two
// processes writing one page both rename complete copies of equal contents (the key is a hash
// of everything that decides them), so the last rename wins and nothing is lost. Every read
// verifies the checksum and the header against what the reader expects; a page that fails is
// deleted and counted, and the read is a miss.
//
// Retention: a page lives for `ttl` after its last use (a get or a put), plus a capacity high
// watermark with LRU eviction down to the low watermark. Last use is kept in memory and in the
// file's mtime (written when it moved by more than ttl / 100), so a restarted process, another
// process and `deepinfer kvstore gc` see it. Neither TTL expiry nor eviction removes a page
// that is leased (a read in progress, or a Lease held) or pinned. Leases and pins are this
// process's: across processes, a reader that has opened a file keeps reading it after another
// process unlinks it (POSIX), so eviction elsewhere costs a later miss, never a torn read.
// The index (which pages exist, their sizes and last use) is rebuilt by scanning DIR on open;
// pages other processes add later are found by a get that opens the file, and the byte total
// counts the pages this process knows (the admin gc rescans).
//
// A full disk (or any write error) fails the put, which is counted (write_failures) and leaves
// no file behind; the caller's request goes on without the page.
//
// Thread-safe: one mutex guards the index; file I/O runs outside it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"
#include "kvstore/page_file.h"

namespace deepinfer::kvstore {

// Writes up to n bytes to fd, as POSIX write(2) does (-1 and errno on failure).
using WriteFn = std::function<long(int fd, const void* data, size_t n)>;

struct PageStoreOptions {
  std::string dir;              // the directory tier; empty: memory only
  int64_t memory_bytes = 0;     // memory tier budget (payload bytes); 0: no memory tier
  int64_t capacity_bytes = 0;   // directory tier high watermark (file bytes); 0: unlimited
  double low_watermark = 0.9;   // eviction frees down to capacity_bytes * low_watermark
  std::chrono::seconds ttl = std::chrono::hours(72);  // after last use; 0: forever
  // Nanoseconds since the Unix epoch. Wall time, not steady: last use travels between
  // processes and hosts in file mtimes. Tests inject their own.
  std::function<int64_t()> clock;
  WriteFn write;                // default ::write; tests inject failures (a full disk)
};

// A page's payload, shared: the memory tier and readers hold the same bytes.
struct Page {
  std::shared_ptr<const std::vector<uint8_t>> data;
  size_t offset = 0;
  size_t size = 0;
  bool from_memory = false;
  std::span<const uint8_t> payload() const { return {data->data() + offset, size}; }
};

struct PageStoreStats {
  int64_t hits = 0;               // gets that returned a page (memory_hits of them from memory)
  int64_t memory_hits = 0;
  int64_t misses = 0;             // gets that did not (absent, or refused by verification)
  int64_t bytes_read = 0;         // file bytes read by hits from the directory
  int64_t bytes_written = 0;      // file bytes of pages written
  int64_t pages_written = 0;
  int64_t write_failures = 0;     // puts that failed (a full disk, a write error)
  int64_t checksum_failures = 0;  // pages refused on read (checksum, truncation, header): deleted
  int64_t evictions = 0;          // directory pages removed by the capacity watermark
  int64_t expirations = 0;        // directory pages removed by the TTL
  int64_t memory_evictions = 0;   // memory copies dropped by the memory budget
  int64_t pages = 0;              // directory pages this process knows
  int64_t bytes = 0;              // their file bytes
  int64_t memory_pages = 0;
  int64_t memory_bytes = 0;
  double index_seconds = 0.0;     // the scan that rebuilt the index on open
};

struct GcReport {
  int64_t expired = 0;
  int64_t evicted = 0;
  int64_t bytes_freed = 0;
};

// One page of a listing: the index's view, not the file's contents.
struct PageEntry {
  PageKey key;
  int64_t bytes = 0;
  int64_t last_use_ns = 0;
};

class PageStore {
 public:
  // Creates DIR (and DIR/pages) when missing, removes temporary files older than an hour
  // (writers that crashed) and rebuilds the index. INVALID_ARGUMENT for a bad option,
  // UNAVAILABLE when DIR cannot be made or read.
  static Result<std::unique_ptr<PageStore>> open(PageStoreOptions options);
  ~PageStore();

  // Stores a page (both tiers). A page the store already has is only marked used.
  Status put(const PageKey& key, const PageMeta& meta, std::shared_ptr<const std::vector<uint8_t>> payload);
  // The page, verified against `expect`: NOT_FOUND when absent, DATA_LOSS when it failed
  // verification (then it is deleted). Either is a miss.
  Result<Page> get(const PageKey& key, const PageMeta& expect);
  // Whether this process's index lists the page (another process may have added it since).
  bool contains(const PageKey& key) const;

  // Holds a page against TTL expiry and eviction while it lives.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : store_(o.store_), key_(o.key_) { o.store_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    ~Lease();
   private:
    friend class PageStore;
    Lease(PageStore* store, const PageKey& key) : store_(store), key_(key) {}
    PageStore* store_ = nullptr;
    PageKey key_;
  };
  Lease lease(const PageKey& key);
  // Pinned pages are never expired or evicted; pins count, unpin undoes one pin.
  void pin(const PageKey& key);
  void unpin(const PageKey& key);

  // Applies the TTL and the capacity watermark now.
  GcReport gc();
  PageStoreStats stats() const;
  std::vector<PageEntry> entries() const;  // directory pages, least recently used first
  const PageStoreOptions& options() const { return options_; }
  std::string page_path(const PageKey& key) const;

 private:
  struct Entry {
    int64_t bytes = 0;       // file bytes, when on disk
    int64_t last_use = 0;
    int64_t disk_mtime = 0;  // the last use the file's mtime says
    bool on_disk = false;
    int32_t leases = 0;
    int32_t pins = 0;
    PageMeta meta;           // of the memory copy
    std::shared_ptr<const std::vector<uint8_t>> memory_data;
    size_t memory_offset = 0, memory_size = 0;
    std::list<PageKey>::iterator disk_pos, memory_pos;
  };
  using Index = std::unordered_map<PageKey, Entry, kv::BlockHashHasher>;

  explicit PageStore(PageStoreOptions options);
  Status scan();
  int64_t now() const { return options_.clock(); }
  Status write_file(const PageKey& key, const PageMeta& meta, std::span<const uint8_t> payload, int64_t mtime,
                    int64_t* file_bytes);
  Result<Page> read_file(const PageKey& key, const PageMeta& expect, int64_t* file_bytes);
  // Under mutex_.
  void touch_locked(Entry& e, const PageKey& key, int64_t t);
  void add_disk_locked(const PageKey& key, Entry& e, int64_t bytes, int64_t t);
  void drop_disk_locked(Index::iterator it);
  void add_memory_locked(const PageKey& key, Entry& e, const PageMeta& meta, const Page& page);
  void drop_memory_locked(Entry& e);
  void erase_if_unused_locked(Index::iterator it);
  // Returns the paths to unlink (outside the lock).
  std::vector<std::string> enforce_locked(int64_t t, GcReport* report);
  void release_lease(const PageKey& key);

  PageStoreOptions options_;
  mutable std::mutex mutex_;
  Index index_;
  std::list<PageKey> disk_lru_;    // least recently used first
  std::list<PageKey> memory_lru_;
  PageStoreStats stats_;
  int64_t last_expiry_check_ = 0;
};

}  // namespace deepinfer::kvstore
