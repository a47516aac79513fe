// deepinfer kvstore bench DIR: the store's page put and get throughput beside raw sequential
// write and read of the same bytes on the same filesystem, in one run; and the time to rebuild
// the index of many pages.
//
// Every figure is of the disk, not of the page cache: written files are fsynced (raw: once at
// the end, as `dd conv=fsync`; the store: each page, plus its rename's folder, as it promises),
// and before each read pass the files' cached pages are dropped (posix_fadvise DONTNEED, which
// needs no privileges for clean pages).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "kvstore/page_store.h"

namespace deepinfer::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

kvstore::PageKey bench_key(int64_t i, const std::string& salt) {
  const auto token = static_cast<int32_t>(i);
  return kv::hash_block(nullptr, std::span<const int32_t>(&token, 1), salt);
}

struct Raw {
  double write_gbps = 0, read_gbps = 0;
};

// One file of n_pages * page_bytes, written in page-sized pieces, fsynced once, read back.
Raw raw_sequential(const std::string& dir, int64_t n_pages, const std::vector<uint8_t>& block) {
  const std::string path = dir + "/raw.bin";
  Raw r;
  const double total = static_cast<double>(n_pages) * static_cast<double>(block.size());
  auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return r;
  for (int64_t i = 0; i < n_pages; ++i) {
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) break;
  }
  ::fsync(fd);
  ::close(fd);
  r.write_gbps = total / seconds_since(t0) / 1e9;
  drop_cache(path);
  std::vector<uint8_t> buffer(block.size());
  t0 = Clock::now();
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  while (in >= 0 && ::read(in, buffer.data(), buffer.size()) > 0) {
  }
  if (in >= 0) ::close(in);
  r.read_gbps = total / seconds_since(t0) / 1e9;
  fs::remove(path);
  return r;
}

}  // namespace

int kvstore_bench_command(const std::string& dir, const Args& args) {
  auto pages = args.get_int("--pages", 64);
  auto page_bytes = parse_byte_size(args.get("--page-bytes").value_or("2949120"));  // SmolLM2: 128 tokens, f16
  auto index_pages = args.get_int("--index-pages", 0);
  if (!pages.ok() || *pages < 1) return fail("--pages must be a positive count", 2);
  if (!page_bytes.ok() || *page_bytes < 1) return fail("--page-bytes must be a size such as 3M", 2);
  if (!index_pages.ok() || *index_pages < 0) return fail("--index-pages must be a count", 2);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string store_dir = dir + "/bench-store";
  fs::remove_all(store_dir);
  std::vector<uint8_t> block(static_cast<size_t>(*page_bytes));
  std::mt19937_64 rng(1);
  for (auto& b : block) b = static_cast<uint8_t>(rng());
  const double total = static_cast<double>(*pages) * static_cast<double>(*page_bytes);
  const kvstore::PageMeta meta{"bench", "bench", 128};

  const Raw raw = raw_sequential(dir, *pages, block);
  auto payload = std::make_shared<const std::vector<uint8_t>>(block);
  double put_gbps = 0, get_gbps = 0;
  {
    kvstore::PageStoreOptions o;
    o.dir = store_dir;
    auto store = kvstore::PageStore::open(o);
    if (!store.ok()) return fail(store.status().message());
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < *pages; ++i) {
      const Status st = (*store)->put(bench_key(i, "bench"), meta, payload);
      if (!st.ok()) return fail(st.message());
    }
    put_gbps = total / seconds_since(t0) / 1e9;
  }
  {
    kvstore::PageStoreOptions o;
    o.dir = store_dir;
    auto store = std::move(kvstore::PageStore::open(o)).value();  // a fresh process: from the disk
    for (int64_t i = 0; i < *pages; ++i) drop_cache(store->page_path(bench_key(i, "bench")));
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < *pages; ++i) {
      if (!store->get(bench_key(i, "bench"), meta).ok()) return fail("a page written by the bench did not read back");
    }
    get_gbps = total / seconds_since(t0) / 1e9;
  }
  nlohmann::ordered_json out = {{"pages", *pages},           {"page_bytes", *page_bytes},
                                {"raw_write_gbps", raw.write_gbps}, {"put_gbps", put_gbps},
                                {"raw_read_gbps", raw.read_gbps},   {"get_gbps", get_gbps}};
  if (*index_pages > 0) {
    // Small pages written straight to their places (no fsync: only the scan is timed).
    const std::string index_dir = dir + "/bench-index";
    fs::remove_all(index_dir);
    kvstore::PageStoreOptions o;
    o.dir = index_dir;
    const std::string probe_path = std::move(kvstore::PageStore::open(o)).value()->page_path(bench_key(0, "i"));
    const std::vector<uint8_t> small(256, 7);
    for (int64_t i = 0; i < *index_pages; ++i) {
      const kvstore::PageKey key = bench_key(i, "index");
      const std::string hex = kvstore::key_hex(key);
      const std::string folder = index_dir + "/pages/" + hex.substr(0, 2);
      fs::create_directories(folder);
      const std::vector<uint8_t> file = kvstore::encode_page(key, meta, small);
      std::ofstream(folder + "/" + hex + ".page", std::ios::binary)
          .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
    }
    auto store = std::move(kvstore::PageStore::open(o)).value();
    out["index_pages"] = store->stats().pages;
    out["index_seconds"] = store->stats().index_seconds;
    fs::remove_all(index_dir);
  }
  fs::remove_all(store_dir);
  std::puts(out.dump().c_str());
  return 0;
}

}  // namespace deepinfer::cli
