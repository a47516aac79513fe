// Whole-store views for `deepinfer kvstore` (stat, verify): they read every page file of a
// PageStore's directory, so they are for operators, not for the serving path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvstore/page_store.h"

namespace deepinfer::kvstore {

struct StoreSummary {
  int64_t pages = 0;
  int64_t bytes = 0;
  int64_t unreadable = 0;                       // headers that do not parse
  std::map<std::string, int64_t> models;        // fingerprint -> pages
  // Pages by time since last use: < 1 h, < 6 h, < 24 h, < 72 h, older.
  std::vector<int64_t> age_histogram = std::vector<int64_t>(5, 0);
  double index_seconds = 0.0;
};
inline constexpr const char* kAgeBuckets[] = {"<1h", "<6h", "<24h", "<72h", ">=72h"};

// Reads each page's header (not its payload).
StoreSummary summarize(const PageStore& store);

struct VerifyReport {
  int64_t pages = 0;
  int64_t ok = 0;
  std::vector<std::string> bad;  // "path: why"
  int64_t removed = 0;
};

// Reads every page whole and checks its checksum, its header and that its name is its key;
// with `remove_bad`, deletes those that fail.
VerifyReport verify(const PageStore& store, bool remove_bad);

}  // namespace deepinfer::kvstore
