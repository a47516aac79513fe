#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace deepinfer::grammar {

void CodepointSet::add_range(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  ranges_.emplace_back(lo, std::min(hi, kMaxCodepoint));
  normalize();
}

void CodepointSet::add_set(const CodepointSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void CodepointSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.ranges_.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::minus(const CodepointSet& other) const {
  CodepointSet keep = other.complement();
  CodepointSet out;
  for (const auto& [a, b] : ranges_) {
    for (const auto& [c, d] : keep.ranges_) {
      const uint32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    }
  }
  out.normalize();
  return out;
}

bool CodepointSet::contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::make_pair(cp, kMaxCodepoint + 1));
  if (it == ranges_.begin()) return false;
  --it;
  return cp >= it->first && cp <= it->second;
}

std::string utf8_encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return out;
}

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// [lo, hi] share their UTF-8 length and split into byte ranges position by position.
void split(Grammar& g, uint32_t lo, uint32_t hi, std::vector<ExprId>* out) {
  const uint32_t boundaries[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t b : boundaries) {
    if (lo <= b && hi > b) {
      split(g, lo, b, out);
      split(g, b + 1, hi, out);
      return;
    }
  }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(g, lo, lo | m, out);
        split(g, (lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(g, lo, (hi & ~m) - 1, out);
        split(g, hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<ExprId> parts;
  for (size_t i = 0; i < a.size(); ++i) {
    parts.push_back(g.byte_range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])));
  }
  out->push_back(g.seq(std::move(parts)));
}

}  // namespace

ExprId utf8_expr(Grammar& g, const CodepointSet& set) {
  CodepointSet surrogates;
  surrogates.add_range(0xD800, 0xDFFF);
  const CodepointSet valid = set.minus(surrogates);
  std::vector<ExprId> alts;
  ByteSet ascii;  // single bytes are merged into one set
  for (const auto& [lo, hi] : valid.ranges()) {
    uint32_t start = lo;
    if (start < 0x80) {
      ascii.add_range(static_cast<uint8_t>(start), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
      if (hi < 0x80) continue;
      start = 0x80;
    }
    split(g, start, hi, &alts);
  }
  if (!ascii.empty()) alts.insert(alts.begin(), g.byte_set(ascii));
  return g.alt(std::move(alts));
}

}  // namespace deepinfer::grammar
