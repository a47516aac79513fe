#include "engine/kv_store_connector.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

namespace {

// What a page's payload is, beyond the model fingerprint: each stored group's shape, element
// type and block size, and the page's length. A reader with any of it different refuses it.
std::string layout_of(const std::vector<KvGroupSpec>& groups, int64_t page_tokens) {
  std::string s = "page=" + std::to_string(page_tokens);
  for (const KvGroupSpec& g : groups) {
    if (!g.prefix_cached()) continue;
    s += ";" + g.name + ":" + std::string(kv_group_kind_name(g.kind)) + ",layers=" + std::to_string(g.layers.size()) +
         ",heads=" + std::to_string(g.n_head_kv) + ",dim=" + std::to_string(g.head_dim) +
         ",rows=" + std::to_string(g.tokens_per_row) + ",block=" + std::to_string(g.block_size) + ",dtype=" +
         std::string(dtype_name(g.dtype)) + (g.k_only ? ",k_only" : "") + ",bytes=" + std::to_string(g.block_bytes());
  }
  return s;
}

}  // namespace

Status KvStoreConnector::validate(const KvStoreConnectorConfig& config, const kv::KvCacheConfig& kv) {
  if (config.page_tokens < 1) return invalid_argument("KV store pages must hold at least one token");
  if (!kv.enable_prefix_caching) return invalid_argument("the KV store needs prefix caching");
  for (const KvGroupSpec& spec : kv.groups) {
    if (spec.prefix_cached() && config.page_tokens % spec.block_size != 0) {
      return invalid_argument("KV store pages of " + std::to_string(config.page_tokens) +
                              " tokens are not a multiple of KV group '" + spec.name + "''s blocks of " +
                              std::to_string(spec.block_size));
    }
  }
  return {};
}

KvStoreConnector::KvStoreConnector(KvStoreConnectorConfig config, kvstore::PageStore& store, kv::KvCacheManager& kv,
                                   backend::KvCache& kv_memory, std::function<void()> wake)
    : config_(config), store_(store), kv_(kv), kv_memory_(kv_memory), wake_(std::move(wake)) {
  DI_ICHECK(validate(config_, kv_.config()).ok());
  const std::vector<KvGroupSpec>& groups = kv_memory_.groups();
  meta_ = {kv_.config().model_fingerprint, layout_of(groups, config_.page_tokens), config_.page_tokens};
  group_offset_.assign(groups.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].prefix_cached()) continue;
    group_offset_[g] = page_bytes_;
    page_bytes_ += static_cast<size_t>(config_.page_tokens / groups[g].block_size) * groups[g].block_bytes();
  }
  base_per_page_ = config_.page_tokens / kv_.base_block_size();
  writer_ = std::make_unique<kvstore::WriteBehind>(store_, config_.write_queue_bytes);
  loader_ = std::make_unique<kvstore::PageLoader>(store_, [this](kvstore::LoadResult r) { on_load_done(std::move(r)); });
}

KvStoreConnector::~KvStoreConnector() {
  loader_.reset();  // its thread calls back into this object
  writer_.reset();  // writes what is queued
}

size_t KvStoreConnector::page_offset(int g, int64_t j) const {
  const KvGroupSpec& spec = kv_memory_.groups()[static_cast<size_t>(g)];
  const int64_t per_page = config_.page_tokens / spec.block_size;
  return group_offset_[static_cast<size_t>(g)] + static_cast<size_t>(j % per_page) * spec.block_bytes();
}

bool KvStoreConnector::start_load(const Request& r, int64_t n_hit) {
  const int64_t page = config_.page_tokens;
  // Whole pages before the last prompt token (its logits are always computed).
  const int64_t n_pages = (r.n_tokens() - 1) / page;
  const int64_t first = n_hit / page;
  if (first >= n_pages) return false;
  Pending p;
  p.tokens.assign(r.tokens.begin(), r.tokens.begin() + n_pages * page);
  p.cache_salt = r.cache_salt;
  p.first_page = first;
  const std::vector<kv::BlockHash> chain = kv_.prefix_keys(p.tokens, p.cache_salt, n_pages * base_per_page_);
  std::vector<kvstore::PageKey> keys;
  for (int64_t i = first; i < n_pages; ++i) keys.push_back(chain[static_cast<size_t>((i + 1) * base_per_page_ - 1)]);
  pending_[r.id] = std::move(p);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.load_requests;
  }
  loader_->submit(r.id, std::move(keys), std::vector<kvstore::PageMeta>(static_cast<size_t>(n_pages - first), meta_));
  return true;
}

void KvStoreConnector::on_load_done(kvstore::LoadResult result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.push_back(std::move(result));
  }
  wake_();
}

std::vector<RequestId> KvStoreConnector::take_loaded() {
  std::vector<kvstore::LoadResult> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.empty()) return {};
    done.swap(done_);
  }
  std::vector<RequestId> ready;
  KvStoreConnectorStats delta;
  for (kvstore::LoadResult& result : done) {
    delta.load_seconds += result.seconds;
    auto it = pending_.find(result.tag);
    if (it == pending_.end()) continue;  // cancelled meanwhile
    const Pending& p = it->second;
    const auto n_found = static_cast<int64_t>(result.pages.size());
    const int64_t n_looked = static_cast<int64_t>(p.tokens.size()) / config_.page_tokens - p.first_page;
    delta.hit_pages += n_found;
    delta.miss_pages += n_found < n_looked;  // the lookup ends at the first page missing
    const int64_t page_start = p.first_page * config_.page_tokens;
    // The in-process hit may have moved while the pages were read (another request published
    // the same prefix, or the pool evicted some): import from where it is now. Below the first
    // page it must still reach page_start, or the import refuses.
    const int64_t n_cached = kv_.peek_cached_prefix(p.tokens, p.cache_salt).n_tokens;
    const int64_t n_from = std::max(page_start, n_cached);
    const int64_t n_to = page_start + n_found * config_.page_tokens;
    if (n_found > 0 && n_from < n_to) {
      const size_t writes_before = block_writes_.size();
      const auto fill = [&](int g, int64_t j, kv::BlockId block) {
        const KvGroupSpec& spec = kv_memory_.groups()[static_cast<size_t>(g)];
        const int64_t page = j * spec.block_size / config_.page_tokens - p.first_page;
        block_writes_.push_back({g, block, result.pages[static_cast<size_t>(page)], page_offset(g, j), spec.block_bytes()});
        return true;
      };
      if (kv_.import_prefix(p.tokens, p.cache_salt, n_from, n_to, fill) == n_to) {
        delta.hit_tokens += n_to - n_from;
      } else {
        block_writes_.resize(writes_before);
        ++delta.import_failures;
      }
    }
    ready.push_back(result.tag);
    pending_.erase(it);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.hit_pages += delta.hit_pages;
  stats_.miss_pages += delta.miss_pages;
  stats_.hit_tokens += delta.hit_tokens;
  stats_.import_failures += delta.import_failures;
  stats_.load_seconds += delta.load_seconds;
  return ready;
}

std::vector<KvStoreConnector::BlockWrite> KvStoreConnector::take_block_writes() {
  std::vector<BlockWrite> out;
  out.swap(block_writes_);
  return out;
}

Status KvStoreConnector::apply(const std::vector<BlockWrite>& writes) {
  for (const BlockWrite& w : writes) {
    DI_RETURN_IF_ERROR(kv_memory_.write_block(w.group, w.block, w.page.payload().subspan(w.offset, w.bytes)));
  }
  return {};
}

void KvStoreConnector::on_computed(const Request& r, int64_t n_computed) {
  const int64_t n_pages = n_computed / config_.page_tokens;
  int64_t& published = pages_published_[r.id];
  if (published >= n_pages) return;
  const std::span<const kv::BlockHash> keys = kv_.published_keys(r.id);
  DI_ICHECK(static_cast<int64_t>(keys.size()) >= n_pages * base_per_page_);
  int64_t queued = 0, dropped = 0;
  for (int64_t i = published; i < n_pages; ++i) {
    const kv::BlockHash& key = keys[static_cast<size_t>((i + 1) * base_per_page_ - 1)];
    if (store_.contains(key)) continue;
    // Checked before the copy: a page that cannot be queued costs nothing.
    if (!writer_->has_room(static_cast<int64_t>(page_bytes_))) {
      ++dropped;
      continue;
    }
    auto payload = std::make_shared<std::vector<uint8_t>>(page_bytes_);
    bool ok = true;
    for (int g = 0; g < kv_.n_groups() && ok; ++g) {
      const KvGroupSpec& spec = kv_memory_.groups()[static_cast<size_t>(g)];
      if (!spec.prefix_cached()) continue;
      const std::span<const kv::BlockId> table = kv_.block_table(r.id, g);
      const int64_t per_page = config_.page_tokens / spec.block_size;
      for (int64_t j = i * per_page; j < (i + 1) * per_page && ok; ++j) {
        ok = kv_memory_.read_block(g, table[static_cast<size_t>(j)],
                                   std::span<uint8_t>(*payload).subspan(page_offset(g, j), spec.block_bytes()))
                 .ok();
      }
    }
    if (!ok) continue;
    if (writer_->submit(key, meta_, std::move(payload))) ++queued;
  }
  published = n_pages;
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.pages_queued += queued;
  stats_.write_drops += dropped;
}

void KvStoreConnector::on_finished(RequestId id) {
  pending_.erase(id);
  pages_published_.erase(id);
}

void KvStoreConnector::flush() { writer_->flush(); }

KvStoreConnectorStats KvStoreConnector::stats() const {
  KvStoreConnectorStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s = stats_;
  }
  s.write_drops += writer_->stats().dropped;
  return s;
}

}  // namespace deepinfer
