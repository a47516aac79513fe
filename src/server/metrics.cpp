#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/check.h"

namespace deepinfer::server {

namespace {

enum class Kind { kCounter, kGauge, kHistogram, kGaugeFamily, kCounterFamily };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kCounter:
    case Kind::kCounterFamily: return "counter";
    case Kind::kGauge:
    case Kind::kGaugeFamily: return "gauge";
    case Kind::kHistogram: return "histogram";
  }
  return "untyped";
}

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

// Prometheus parses numbers with Go's ParseFloat: the shortest round-trip form ("3", "0.25",
// "1e+21") is accepted, and the special values must be spelled +Inf, -Inf and NaN.
void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  DI_ICHECK(ec == std::errc());
  out.append(buf, end);
}

void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  DI_ICHECK(ec == std::errc());
  out.append(buf, end);
}

// HELP text escapes only backslash and newline (format 0.0.4).
void append_help(std::string& out, const std::string& help) {
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

// std::atomic<double>::fetch_add is C++20 but a CAS loop states the intent on every toolchain.
void atomic_add(std::atomic<double>& target, double v) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::inc(double v) { atomic_add(value_, v); }
double Counter::value() const { return value_.load(std::memory_order_relaxed); }

void Gauge::set(double v) { value_.store(v, std::memory_order_relaxed); }
double Gauge::value() const { return value_.load(std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  DI_ICHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
  DI_ICHECK(std::adjacent_find(bounds_.begin(), bounds_.end()) == bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  // Bucket `le` is inclusive: an observation equal to a bound counts in that bound's bucket.
  size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  atomic_add(sum_, v);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

double Histogram::sum() const { return sum_.load(std::memory_order_relaxed); }

struct MetricsRegistry::Entry {
  Kind kind = Kind::kCounter;
  std::string name;
  std::string help;
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
  std::unique_ptr<GaugeFamily> family;
};

Gauge& GaugeFamily::with(const std::string& value) {
  std::lock_guard lock(mutex_);
  for (auto& [v, g] : children_) {
    if (v == value) return *g;
  }
  children_.emplace_back(value, std::make_unique<Gauge>());
  return *children_.back().second;
}

std::vector<std::pair<std::string, double>> GaugeFamily::values() const {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [v, g] : children_) out.emplace_back(v, g->value());
  return out;
}

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

namespace {

// The entry named `name`, added by `fill` when new. Entries is the registry's private list, so
// this takes it as a template parameter.
template <typename Entries, typename Fill>
auto& find_or_add(Entries& entries, const std::string& name, const std::string& help, Kind kind, Fill fill) {
  for (auto& e : entries) {
    if (e->name == name) {
      DI_ICHECK(e->kind == kind);  // one name, one type
      return *e;
    }
  }
  DI_ICHECK(valid_metric_name(name));
  auto e = std::make_unique<typename Entries::value_type::element_type>();
  e->kind = kind;
  e->name = name;
  e->help = help;
  fill(*e);
  entries.push_back(std::move(e));
  return *entries.back();
}

}  // namespace

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  return *find_or_add(entries_, name, help, Kind::kCounter, [](Entry& e) {
            e.counter = std::make_unique<Counter>();
          }).counter;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  return *find_or_add(entries_, name, help, Kind::kGauge, [](Entry& e) {
            e.gauge = std::make_unique<Gauge>();
          }).gauge;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> upper_bounds) {
  std::lock_guard lock(mutex_);
  return *find_or_add(entries_, name, help, Kind::kHistogram, [&](Entry& e) {
            e.histogram = std::make_unique<Histogram>(std::move(upper_bounds));
          }).histogram;
}

GaugeFamily& MetricsRegistry::gauge_family(const std::string& name, const std::string& help, const std::string& label) {
  std::lock_guard lock(mutex_);
  DI_ICHECK(valid_metric_name(label));
  return *find_or_add(entries_, name, help, Kind::kGaugeFamily, [&](Entry& e) {
            e.family = std::make_unique<GaugeFamily>(label);
          }).family;
}

GaugeFamily& MetricsRegistry::counter_family(const std::string& name, const std::string& help, const std::string& label) {
  std::lock_guard lock(mutex_);
  DI_ICHECK(valid_metric_name(label));
  return *find_or_add(entries_, name, help, Kind::kCounterFamily, [&](Entry& e) {
            e.family = std::make_unique<GaugeFamily>(label);
          }).family;
}

void MetricsRegistry::on_render(std::function<void()> refresh) {
  std::lock_guard lock(mutex_);
  refreshers_.push_back(std::move(refresh));
}

std::string MetricsRegistry::render() const {
  // Refreshers run outside the lock so that one may look up (or register) a metric.
  std::vector<std::function<void()>> refreshers;
  {
    std::lock_guard lock(mutex_);
    refreshers = refreshers_;
  }
  for (auto& refresh : refreshers) refresh();

  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& e : entries_) {
    out += "# HELP ";
    out += e->name;
    out += ' ';
    append_help(out, e->help);
    out += "\n# TYPE ";
    out += e->name;
    out += ' ';
    out += kind_name(e->kind);
    out += '\n';
    switch (e->kind) {
      case Kind::kCounter:
      case Kind::kGauge:
        out += e->name;
        out += ' ';
        append_number(out, e->kind == Kind::kCounter ? e->counter->value() : e->gauge->value());
        out += '\n';
        break;
      case Kind::kGaugeFamily:
      case Kind::kCounterFamily:
        for (const auto& [value, number] : e->family->values()) {
          out += e->name;
          out += '{';
          out += e->family->label();
          out += "=\"";
          for (char c : value) {  // label values escape backslash, quote and newline
            if (c == '\\' || c == '"') out += '\\';
            if (c == '\n') {
              out += "\\n";
              continue;
            }
            out += c;
          }
          out += "\"} ";
          append_number(out, number);
          out += '\n';
        }
        break;
      case Kind::kHistogram: {
        const Histogram& h = *e->histogram;
        std::vector<uint64_t> cumulative = h.cumulative_counts();
        for (size_t i = 0; i <= h.upper_bounds().size(); ++i) {
          out += e->name;
          out += "_bucket{le=\"";
          if (i < h.upper_bounds().size()) {
            append_number(out, h.upper_bounds()[i]);
          } else {
            out += "+Inf";
          }
          out += "\"} ";
          append_uint(out, cumulative[i]);
          out += '\n';
        }
        out += e->name;
        out += "_sum ";
        append_number(out, h.sum());
        out += '\n';
        out += e->name;
        out += "_count ";
        append_uint(out, cumulative.back());
        out += '\n';
        break;
      }
    }
  }
  return out;
}

}  // namespace deepinfer::server
