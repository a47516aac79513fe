#include "kvstore/page_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace deepinfer::kvstore {

namespace {

constexpr int64_t kNsPerSecond = 1'000'000'000;
constexpr int64_t kStaleTempNs = 3600 * kNsPerSecond;  // a temporary file this old lost its writer

int64_t system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

timespec to_timespec(int64_t ns) {
  timespec t;
  t.tv_sec = static_cast<time_t>(ns / kNsPerSecond);
  t.tv_nsec = static_cast<long>(ns % kNsPerSecond);
  return t;
}

int64_t mtime_ns(const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * kNsPerSecond + st.st_mtim.tv_nsec; }

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Writes all of `data` through `write`; false with errno set on failure.
bool write_all(const WriteFn& write, int fd, std::span<const uint8_t> data) {
  while (!data.empty()) {
    const long n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    data = data.subspan(static_cast<size_t>(n));
  }
  return true;
}

bool is_page_name(std::string_view name) {
  return name.size() == 64 + 5 && name.substr(64) == ".page" && name[0] != '.';
}

bool is_temp_name(std::string_view name) { return name.size() > 4 && name[0] == '.' && name.ends_with(".tmp"); }

// A name no other writer uses at the same time: this process's id, a counter, the time.
std::string temp_name(const PageKey& key) {
  static std::atomic<uint64_t> counter{0};
  char name[160];
  std::snprintf(name, sizeof name, ".%s.%d.%llu.%lld.tmp", key_hex(key).c_str(), static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter++), static_cast<long long>(system_now_ns()));
  return name;
}

}  // namespace

PageStore::PageStore(PageStoreOptions options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = system_now_ns;
  if (!options_.write) options_.write = [](int fd, const void* p, size_t n) { return static_cast<long>(::write(fd, p, n)); };
}

PageStore::~PageStore() = default;

Result<std::unique_ptr<PageStore>> PageStore::open(PageStoreOptions options) {
  if (options.memory_bytes < 0 || options.capacity_bytes < 0) {
    return invalid_argument("KV store memory and capacity must not be negative");
  }
  if (options.low_watermark <= 0.0 || options.low_watermark > 1.0) {
    return invalid_argument("KV store low watermark must be in (0, 1]");
  }
  if (options.ttl.count() < 0) return invalid_argument("KV store TTL must not be negative");
  std::unique_ptr<PageStore> store(new PageStore(std::move(options)));
  if (!store->options_.dir.empty()) DI_RETURN_IF_ERROR(store->scan());
  return store;
}

std::string PageStore::page_path(const PageKey& key) const {
  const std::string hex = key_hex(key);
  return options_.dir + "/pages/" + hex.substr(0, 2) + "/" + hex + ".page";
}

Status PageStore::scan() {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string root = options_.dir + "/pages";
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return unavailable("cannot create the KV store directory " + root + ": " + ec.message());
  DIR* top = ::opendir(root.c_str());
  if (top == nullptr) return unavailable(errno_text("cannot read the KV store directory", root));
  struct Found {
    PageKey key;
    int64_t bytes, mtime;
  };
  std::vector<Found> found;
  const int64_t t = now();
  while (dirent* d = ::readdir(top)) {
    if (d->d_name[0] == '.' || std::strlen(d->d_name) != 2) continue;
    const std::string sub = root + "/" + d->d_name;
    const int sub_fd = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sub_fd < 0) continue;
    DIR* dir = ::fdopendir(sub_fd);
    if (dir == nullptr) {
      ::close(sub_fd);
      continue;
    }
    while (dirent* f = ::readdir(dir)) {
      const std::string_view name = f->d_name;
      const bool page = is_page_name(name), temp = is_temp_name(name);
      if (!page && !temp) continue;
      struct stat st;
      if (::fstatat(sub_fd, f->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      if (temp) {
        if (t - mtime_ns(st) > kStaleTempNs) ::unlinkat(sub_fd, f->d_name, 0);
        continue;
      }
      auto key = key_from_hex(name.substr(0, 64));
      if (key.ok()) found.push_back({*key, static_cast<int64_t>(st.st_size), mtime_ns(st)});
    }
    ::closedir(dir);
  }
  ::closedir(top);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Found& f : found) {
    Entry& e = index_[f.key];
    add_disk_locked(f.key, e, f.bytes, f.mtime);
    e.disk_mtime = f.mtime;
  }
  stats_.index_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {};
}

// ---- Index bookkeeping (under mutex_) ----

void PageStore::touch_locked(Entry& e, const PageKey& key, int64_t t) {
  e.last_use = std::max(e.last_use, t);
  if (e.on_disk) disk_lru_.splice(disk_lru_.end(), disk_lru_, e.disk_pos);
  if (e.memory_data) memory_lru_.splice(memory_lru_.end(), memory_lru_, e.memory_pos);
}

void PageStore::add_disk_locked(const PageKey& key, Entry& e, int64_t bytes, int64_t t) {
  if (e.on_disk) {
    stats_.bytes += bytes - e.bytes;
    e.bytes = bytes;
    touch_locked(e, key, t);
    return;
  }
  e.on_disk = true;
  e.bytes = bytes;
  e.last_use = std::max(e.last_use, t);
  e.disk_pos = disk_lru_.insert(disk_lru_.end(), key);
  ++stats_.pages;
  stats_.bytes += bytes;
}

void PageStore::drop_disk_locked(Index::iterator it) {
  Entry& e = it->second;
  if (!e.on_disk) return;
  disk_lru_.erase(e.disk_pos);
  e.on_disk = false;
  --stats_.pages;
  stats_.bytes -= e.bytes;
  e.bytes = 0;
}

void PageStore::add_memory_locked(const PageKey& key, Entry& e, const PageMeta& meta, const Page& page) {
  if (options_.memory_bytes <= 0 || static_cast<int64_t>(page.size) > options_.memory_bytes) return;
  if (e.memory_data) return;
  e.meta = meta;
  e.memory_data = page.data;
  e.memory_offset = page.offset;
  e.memory_size = page.size;
  e.memory_pos = memory_lru_.insert(memory_lru_.end(), key);
  ++stats_.memory_pages;
  stats_.memory_bytes += static_cast<int64_t>(page.size);
  // Memory copies go least recently used first; readers keep the bytes they hold.
  while (stats_.memory_bytes > options_.memory_bytes && !memory_lru_.empty()) {
    auto victim = index_.find(memory_lru_.front());
    DI_ICHECK(victim != index_.end());
    drop_memory_locked(victim->second);
    ++stats_.memory_evictions;
    erase_if_unused_locked(victim);
  }
}

void PageStore::drop_memory_locked(Entry& e) {
  if (!e.memory_data) return;
  memory_lru_.erase(e.memory_pos);
  --stats_.memory_pages;
  stats_.memory_bytes -= static_cast<int64_t>(e.memory_size);
  e.memory_data.reset();
  e.memory_size = 0;
}

void PageStore::erase_if_unused_locked(Index::iterator it) {
  const Entry& e = it->second;
  if (!e.on_disk && !e.memory_data && e.leases == 0 && e.pins == 0) index_.erase(it);
}

std::vector<std::string> PageStore::enforce_locked(int64_t t, GcReport* report) {
  std::vector<std::string> doomed;
  const auto remove = [&](Index::iterator it, int64_t* counter, int64_t* report_counter) {
    if (!it->second.on_disk) return;
    doomed.push_back(page_path(it->first));
    if (report) report->bytes_freed += it->second.bytes;
    drop_disk_locked(it);
    drop_memory_locked(it->second);
    ++*counter;
    if (report) ++*report_counter;
    erase_if_unused_locked(it);
  };
  int64_t unused = 0;
  // TTL: the list is in last-use order, so expired pages are at its front.
  const int64_t ttl_ns = static_cast<int64_t>(options_.ttl.count()) * kNsPerSecond;
  if (ttl_ns > 0) {
    for (auto pos = disk_lru_.begin(); pos != disk_lru_.end();) {
      auto it = index_.find(*pos++);
      if (it->second.last_use + ttl_ns > t) break;
      if (it->second.leases > 0 || it->second.pins > 0) continue;
      remove(it, &stats_.expirations, report ? &report->expired : &unused);
    }
  }
  if (options_.capacity_bytes > 0 && stats_.bytes > options_.capacity_bytes) {
    const auto low = static_cast<int64_t>(static_cast<double>(options_.capacity_bytes) * options_.low_watermark);
    for (auto pos = disk_lru_.begin(); pos != disk_lru_.end() && stats_.bytes > low;) {
      auto it = index_.find(*pos++);
      if (it->second.leases > 0 || it->second.pins > 0) continue;
      remove(it, &stats_.evictions, report ? &report->evicted : &unused);
    }
  }
  return doomed;
}

// ---- Files ----

Status PageStore::write_file(const PageKey& key, const PageMeta& meta, std::span<const uint8_t> payload,
                             int64_t mtime, int64_t* file_bytes) {
  const std::string final_path = page_path(key);
  const std::string folder = final_path.substr(0, final_path.rfind('/'));
  if (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) return unavailable(errno_text("cannot create", folder));
  const std::string temp = folder + "/" + temp_name(key);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string message = errno_text("cannot create", temp);
    return errno == ENOSPC ? resource_exhausted(message) : unavailable(message);
  }
  const std::vector<uint8_t> header = encode_page_header(key, meta, payload.size());
  uint8_t trailer[kPageTrailerBytes];
  const uint64_t sum = page_checksum(header, payload);
  for (size_t i = 0; i < kPageTrailerBytes; ++i) trailer[i] = static_cast<uint8_t>(sum >> (8 * i));
  int err = 0;  // the first failure's errno
  const auto step = [&](bool ok) {
    if (!ok && err == 0) err = errno != 0 ? errno : EIO;
    return ok;
  };
  const timespec times[2] = {to_timespec(mtime), to_timespec(mtime)};
  [[maybe_unused]] const bool synced =
      step(write_all(options_.write, fd, header) && write_all(options_.write, fd, payload) &&
           write_all(options_.write, fd, trailer)) &&
      step(::fsync(fd) == 0) && step(::futimens(fd, times) == 0);
  if (::close(fd) != 0) step(false);
  if (err == 0) step(::rename(temp.c_str(), final_path.c_str()) == 0);
  if (err != 0) {
    ::unlink(temp.c_str());
    const std::string message = "cannot write KV page " + final_path + ": " + std::strerror(err);
    const bool full = err == ENOSPC || err == EDQUOT || err == EFBIG;
    return full ? resource_exhausted(message) : unavailable(message);
  }
  // The rename is durable once the folder is.
  const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  *file_bytes = static_cast<int64_t>(header.size() + payload.size() + kPageTrailerBytes);
  return {};
}

Result<Page> PageStore::read_file(const PageKey& key, const PageMeta& expect, int64_t* file_bytes) {
  const std::string path = page_path(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("no KV page " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return not_found(errno_text("cannot stat", path));
  }
  auto data = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < data->size()) {
    const ssize_t n = ::pread(fd, data->data() + got, data->size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data->resize(got);
  *file_bytes = static_cast<int64_t>(got);
  DI_ASSIGN_OR_RETURN(DecodedPage d, decode_page(*data));
  if (!(d.key == key)) return data_loss("KV page " + path + " holds another key");
  if (d.meta.fingerprint != expect.fingerprint) return data_loss("KV page " + path + " is of another model");
  if (d.meta.layout != expect.layout || d.meta.n_tokens != expect.n_tokens) {
    return data_loss("KV page " + path + " has another layout");
  }
  return Page{std::move(data), d.payload_offset, d.payload_bytes, false};
}

// ---- Operations ----

Status PageStore::put(const PageKey& key, const PageMeta& meta, std::shared_ptr<const std::vector<uint8_t>> payload) {
  const int64_t t = now();
  const Page page{payload, 0, payload->size(), true};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end() && (it->second.on_disk || options_.dir.empty())) {
      touch_locked(it->second, key, t);
      add_memory_locked(key, it->second, meta, page);
      return {};
    }
    if (options_.dir.empty()) {
      add_memory_locked(key, index_[key], meta, page);
      erase_if_unused_locked(index_.find(key));
      return {};
    }
  }
  // Another process may have written it already: then it is only used.
  int64_t bytes = 0;
  struct stat st;
  Status written;
  if (::stat(page_path(key).c_str(), &st) == 0) {
    bytes = static_cast<int64_t>(st.st_size);
  } else {
    written = write_file(key, meta, *payload, t, &bytes);
  }
  std::vector<std::string> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!written.ok()) {
      ++stats_.write_failures;
      return written;
    }
    Entry& e = index_[key];
    const bool fresh = !e.on_disk;
    add_disk_locked(key, e, bytes, t);
    e.disk_mtime = t;
    if (fresh) {
      stats_.bytes_written += bytes;
      ++stats_.pages_written;
    }
    add_memory_locked(key, e, meta, page);
    doomed = enforce_locked(t, nullptr);
  }
  for (const std::string& path : doomed) ::unlink(path.c_str());
  return {};
}

Result<Page> PageStore::get(const PageKey& key, const PageMeta& expect) {
  const int64_t t = now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end() && it->second.memory_data && it->second.meta == expect) {
      Entry& e = it->second;
      touch_locked(e, key, t);
      ++stats_.hits;
      ++stats_.memory_hits;
      return Page{e.memory_data, e.memory_offset, e.memory_size, true};
    }
    if (options_.dir.empty()) {
      ++stats_.misses;
      return not_found("KV page not in memory");
    }
    ++index_[key].leases;  // the file is not evicted while it is read
  }
  int64_t bytes = 0;
  Result<Page> page = read_file(key, expect, &bytes);
  bool refresh_mtime = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    DI_ICHECK(it != index_.end());
    Entry& e = it->second;
    --e.leases;
    if (!page.ok()) {
      ++stats_.misses;
      if (page.status().code() == StatusCode::kDataLoss) {
        ++stats_.checksum_failures;
        ::unlink(page_path(key).c_str());
      }
      drop_disk_locked(it);
      erase_if_unused_locked(it);
      return page.status();
    }
    add_disk_locked(key, e, bytes, t);
    ++stats_.hits;
    stats_.bytes_read += bytes;
    const int64_t ttl_ns = static_cast<int64_t>(options_.ttl.count()) * kNsPerSecond;
    refresh_mtime = t - e.disk_mtime > ttl_ns / 100;
    if (refresh_mtime) e.disk_mtime = t;
    add_memory_locked(key, e, expect, *page);
  }
  if (refresh_mtime) {
    const timespec times[2] = {to_timespec(t), to_timespec(t)};
    ::utimensat(AT_FDCWD, page_path(key).c_str(), times, 0);
  }
  return page;
}

bool PageStore::contains(const PageKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  return it != index_.end() && (it->second.on_disk || it->second.memory_data);
}

PageStore::Lease PageStore::lease(const PageKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++index_[key].leases;
  return Lease(this, key);
}

PageStore::Lease::~Lease() {
  if (store_) store_->release_lease(key_);
}

void PageStore::release_lease(const PageKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  DI_ICHECK(it != index_.end() && it->second.leases > 0);
  --it->second.leases;
  erase_if_unused_locked(it);
}

void PageStore::pin(const PageKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++index_[key].pins;
}

void PageStore::unpin(const PageKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second.pins == 0) return;
  --it->second.pins;
  erase_if_unused_locked(it);
}

GcReport PageStore::gc() {
  GcReport report;
  std::vector<std::string> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    doomed = enforce_locked(now(), &report);
  }
  for (const std::string& path : doomed) ::unlink(path.c_str());
  return report;
}

PageStoreStats PageStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<PageEntry> PageStore::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<PageEntry> out;
  out.reserve(disk_lru_.size());
  for (const PageKey& key : disk_lru_) {
    const Entry& e = index_.at(key);
    out.push_back({key, e.bytes, e.last_use});
  }
  return out;
}

}  // namespace deepinfer::kvstore
