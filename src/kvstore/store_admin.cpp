#include "kvstore/store_admin.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

namespace deepinfer::kvstore {

namespace {

constexpr int64_t kHourNs = int64_t{3600} * 1'000'000'000;

std::vector<uint8_t> read_prefix(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> out(limit);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(limit));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

}  // namespace

StoreSummary summarize(const PageStore& store) {
  StoreSummary s;
  const int64_t now = store.options().clock();
  s.index_seconds = store.stats().index_seconds;
  for (const PageEntry& e : store.entries()) {
    ++s.pages;
    s.bytes += e.bytes;
    const int64_t age = now - e.last_use_ns;
    const int bucket = age < kHourNs ? 0 : age < 6 * kHourNs ? 1 : age < 24 * kHourNs ? 2 : age < 72 * kHourNs ? 3 : 4;
    ++s.age_histogram[static_cast<size_t>(bucket)];
    auto header = decode_page_header(read_prefix(store.page_path(e.key), 64 << 10), static_cast<uint64_t>(e.bytes));
    if (header.ok()) {
      ++s.models[header->meta.fingerprint];
    } else {
      ++s.unreadable;
    }
  }
  return s;
}

VerifyReport verify(const PageStore& store, bool remove_bad) {
  VerifyReport r;
  for (const PageEntry& e : store.entries()) {
    ++r.pages;
    const std::string path = store.page_path(e.key);
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto page = decode_page(file);
    std::string why;
    if (!in && !in.eof()) {
      why = "cannot read";
    } else if (!page.ok()) {
      why = page.status().message();
    } else if (!(page->key == e.key)) {
      why = "holds another key than its name";
    }
    if (why.empty()) {
      ++r.ok;
      continue;
    }
    r.bad.push_back(path + ": " + why);
    if (remove_bad && ::unlink(path.c_str()) == 0) ++r.removed;
  }
  return r;
}

}  // namespace deepinfer::kvstore
