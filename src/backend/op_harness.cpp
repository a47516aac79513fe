// The op harness's runner: CaseRun (guarded buffers, deterministic inputs, read-back), the
// comparison with the reference and the perf loop. Reaches backends through backend.h only.
#include "backend/op_harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/check.h"
#include "core/half.h"

namespace deepinfer::backend::harness {

namespace {

// Guards are at least this large, and at least one row of their buffer, so that a write a row
// past the end lands in one as surely as a write one element past it.
constexpr size_t kMinGuardBytes = 1024;
constexpr size_t kGuardAlign = 256;  // payloads stay as aligned as a fresh allocation
constexpr uint8_t kGuardPattern[4] = {0xDB, 0x5A, 0xC3, 0x9E};
// Outputs start as this quiet NaN (f32) or int (i32), so an element the op does not write stays
// visible; other types start as a byte pattern.
constexpr uint32_t kUnwritten32 = 0x7FC0BAD0u;
constexpr uint8_t kUnwritten8 = 0xBD;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

uint8_t guard_byte(size_t i) { return kGuardPattern[i % 4]; }

void fill_guard(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = guard_byte(i);
}

// The first byte of p[0..n) that is not the guard pattern, or n.
size_t first_bad_guard_byte(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != guard_byte(i)) return i;
  }
  return n;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

Tensor bytes_view(void* data, size_t bytes) { return Tensor{data, DType::kI8, 1, static_cast<int64_t>(bytes)}; }

// Offsets of the half-float scale fields in a block of each GGUF format (the layouts of
// backend/cpu/quant_blocks.h, which the file format fixes), and whether the field may be
// negative (a min). Random codes under these scales are sane weights.
struct ScaleField {
  size_t offset;
  bool either_sign;
};
std::vector<ScaleField> scale_fields(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: return {{0, false}};
    case DType::kQ4_1:
    case DType::kQ5_1: return {{0, false}, {2, true}};
    case DType::kQ2_K: return {{80, false}, {82, false}};  // after scales[16] and qs[64]
    case DType::kQ3_K: return {{108, false}};              // after hmask[32], qs[64], scales[12]
    case DType::kQ4_K:
    case DType::kQ5_K: return {{0, false}, {2, false}};
    case DType::kQ6_K: return {{208, false}};              // after ql[128], qh[64], scales[16]
    default: return {};
  }
}

// Weight bytes of a matrix of `type`.
std::vector<uint8_t> random_weights(DType type, int64_t n_out, int64_t n_in, Rng& rng) {
  const size_t row_bytes = dtype_row_bytes(type, n_in);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(n_out));
  const size_t n = static_cast<size_t>(n_out * n_in);
  if (type == DType::kF32) {
    for (size_t i = 0; i < n; ++i) {
      const float v = rng.uniform(-1.0f, 1.0f);
      std::memcpy(&w[4 * i], &v, 4);
    }
    return w;
  }
  if (type == DType::kF16 || type == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) {
      const float v = rng.uniform(-1.0f, 1.0f);
      const uint16_t h = type == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      std::memcpy(&w[2 * i], &h, 2);
    }
    return w;
  }
  for (size_t i = 0; i + 8 <= w.size(); i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(&w[i], &r, 8);
  }
  for (size_t i = w.size() / 8 * 8; i < w.size(); ++i) w[i] = static_cast<uint8_t>(rng.next());
  if (type == DType::kMXFP4) {
    // The scale is one byte, 2^(e - 127): 2^-10 .. 2^-2 as for the half-float scales below.
    for (size_t b = 0; b < w.size(); b += dtype_traits(type)->block_bytes) w[b] = static_cast<uint8_t>(117 + rng.next() % 9);
    return w;
  }
  const std::vector<ScaleField> fields = scale_fields(type);
  DI_ICHECK(!fields.empty());
  const size_t block_bytes = dtype_traits(type)->block_bytes;
  for (const ScaleField& f : fields) DI_ICHECK(f.offset + 2 <= block_bytes);
  for (size_t b = 0; b < w.size(); b += block_bytes) {
    for (const ScaleField& f : fields) {
      float v = std::exp2(rng.uniform(-10.0f, -4.0f));
      if (f.either_sign && (rng.next() & 1)) v = -v;
      const uint16_t h = fp32_to_fp16(v);
      std::memcpy(&w[b + f.offset], &h, 2);
    }
  }
  return w;
}

std::string element_at(int64_t i, int64_t cols) {
  return "element " + std::to_string(i) + " (row " + std::to_string(i / cols) + ", col " + std::to_string(i % cols) +
         ")";
}

std::string value_string(DType dtype, const uint8_t* p) {
  char buf[64];
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, p, 4);
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  } else if (dtype == DType::kI32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    std::snprintf(buf, sizeof buf, "%d", v);
  } else {
    std::snprintf(buf, sizeof buf, "0x%02x", p[0]);
  }
  return buf;
}

size_t element_bytes(DType dtype) { return dtype_row_bytes(dtype, 1); }

}  // namespace

// ---- Rng ----

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
  const float u = static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1)
  return lo + (hi - lo) * u;
}

int64_t Rng::below(int64_t n) {
  DI_ICHECK(n > 0);
  return static_cast<int64_t>(next() % static_cast<uint64_t>(n));
}

std::vector<float> Rng::uniform(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = uniform(lo, hi);
  return v;
}

std::string OpCase::label() const { return std::string(op_name(op)) + " " + name; }

// ---- CaseRun ----

CaseRun::CaseRun(Backend& backend, uint64_t seed)
    : backend_(backend), rng_(seed), queue_(backend.new_queue()), weights_(backend.new_weight_store()) {}

CaseRun::~CaseRun() {
  // Ops may still read inputs on an asynchronous backend.
  if (queue_) (void)queue_->sync();
}

Tensor CaseRun::allocate(std::string name, Role role, DType dtype, int64_t rows, int64_t cols, const void* initial,
                         Tolerance tolerance) {
  if (!status_.ok()) return {};
  DI_ICHECK(rows >= 0 && cols > 0);
  const size_t row_bytes = dtype_row_bytes(dtype, cols);
  const size_t bytes = row_bytes * static_cast<size_t>(rows);
  const size_t guard = round_up(std::max(kMinGuardBytes, row_bytes), kGuardAlign);
  Result<DeviceBuffer> memory = backend_.allocate(guard + bytes + guard);
  if (!memory.ok()) {
    status_ = memory.status();
    return {};
  }
  Buffer b;
  b.name = std::move(name);
  b.role = role;
  b.tolerance = tolerance;
  b.memory = std::move(*memory);
  b.guard = guard;
  b.tensor = Tensor{static_cast<uint8_t*>(b.memory.data()) + guard, dtype, rows, cols};
  // The whole buffer: guards, then the payload's first contents.
  std::vector<uint8_t> host(guard + bytes + guard);
  fill_guard(host.data(), guard);
  fill_guard(host.data() + guard + bytes, guard);
  uint8_t* payload = host.data() + guard;
  if (initial != nullptr) {
    std::memcpy(payload, initial, bytes);
    b.initial.assign(payload, payload + bytes);
  } else if (element_bytes(dtype) == 4) {
    for (size_t i = 0; i + 4 <= bytes; i += 4) std::memcpy(payload + i, &kUnwritten32, 4);
  } else {
    std::memset(payload, kUnwritten8, bytes);
  }
  queue_->upload(host.data(), bytes_view(b.memory.data(), host.size()));
  // The host copy must outlive the upload on an asynchronous backend.
  if (Status st = queue_->sync(); !st.ok()) {
    status_ = st;
    return {};
  }
  buffers_.push_back(std::move(b));
  return buffers_.back().tensor;
}

Tensor CaseRun::input(std::string name, DType dtype, int64_t rows, int64_t cols, const void* host) {
  return allocate(std::move(name), Role::kInput, dtype, rows, cols, host, Tolerance::bitwise());
}

Tensor CaseRun::input(std::string name, int64_t rows, int64_t cols, std::span<const float> values) {
  DI_ICHECK(static_cast<int64_t>(values.size()) == rows * cols);
  return input(std::move(name), DType::kF32, rows, cols, values.data());
}

Tensor CaseRun::input(std::string name, int64_t rows, int64_t cols, std::span<const int32_t> values) {
  DI_ICHECK(static_cast<int64_t>(values.size()) == rows * cols);
  return input(std::move(name), DType::kI32, rows, cols, values.data());
}

Tensor CaseRun::output(std::string name, DType dtype, int64_t rows, int64_t cols, Tolerance tolerance) {
  DI_ICHECK(tolerance.kind == Tolerance::Kind::kBitwise || dtype == DType::kF32);
  return allocate(std::move(name), Role::kOutput, dtype, rows, cols, nullptr, tolerance);
}

Tensor CaseRun::inout(std::string name, int64_t rows, int64_t cols, std::span<const float> values,
                      Tolerance tolerance) {
  DI_ICHECK(static_cast<int64_t>(values.size()) == rows * cols);
  return allocate(std::move(name), Role::kInOut, DType::kF32, rows, cols, values.data(), tolerance);
}

void* CaseRun::host_output(std::string name, size_t bytes) {
  HostOutput& h = host_outputs_.emplace_back();
  h.name = std::move(name);
  h.guard = kMinGuardBytes;
  h.bytes.resize(h.guard + bytes + h.guard);
  fill_guard(h.bytes.data(), h.guard);
  std::memset(h.bytes.data() + h.guard, kUnwritten8, bytes);
  fill_guard(h.bytes.data() + h.guard + bytes, h.guard);
  return h.bytes.data() + h.guard;
}

Matrix CaseRun::matrix(std::string name, DType dtype, int64_t n_out, int64_t n_in) {
  if (!status_.ok()) return {};
  const std::vector<uint8_t>& w = weight_bytes_.emplace_back(random_weights(dtype, n_out, n_in, rng_));
  Result<Matrix> m = weights_->add_matrix(name, dtype, w.data(), n_out, n_in);
  if (!m.ok()) {
    status_ = m.status();
    return {};
  }
  return *m;
}

Tensor CaseRun::vector(std::span<const float> values) {
  if (!status_.ok()) return {};
  Result<Tensor> t = weights_->add_vector(values);
  if (!t.ok()) {
    status_ = t.status();
    return {};
  }
  return *t;
}

KvCache* CaseRun::kv_cache(std::vector<KvGroupSpec> groups, KvCheck check) {
  if (!status_.ok()) return nullptr;
  Result<std::unique_ptr<KvCache>> kv = backend_.allocate_kv(std::move(groups));
  if (!kv.ok()) {
    status_ = kv.status();
    return nullptr;
  }
  kv_caches_.emplace_back(std::move(*kv), check);
  return kv_caches_.back().first.get();
}

Status CaseRun::set_batch(BatchSpec spec) {
  DI_RETURN_IF_ERROR(status_);
  int64_t n_tokens = 0;
  for (const SequenceSpec& s : spec.sequences) n_tokens += s.n_tokens;
  if (spec.tokens.empty()) spec.tokens.assign(static_cast<size_t>(n_tokens), 0);
  const BatchSpec& b = batches_.emplace_back(std::move(spec));
  std::vector<StepSequence>& steps = steps_.emplace_back();
  for (const SequenceSpec& s : b.sequences) {
    StepSequence step;
    step.n_tokens = s.n_tokens;
    step.first_position = s.first_position;
    DI_ICHECK(s.block_tables.size() <= static_cast<size_t>(kMaxKvGroups));
    for (size_t g = 0; g < s.block_tables.size(); ++g) step.block_tables[g] = s.block_tables[g];
    for (size_t g = 0; g < s.min_position.size(); ++g) step.min_position[g] = s.min_position[g];
    for (size_t g = 0; g < s.first_write.size(); ++g) step.first_write[g] = s.first_write[g];
    steps.push_back(step);
  }
  return queue_->set_batch(StepBatch{b.tokens, steps, b.output_rows});
}

void CaseRun::same_bits(std::string a, int64_t a_row, std::string b, int64_t b_row, int64_t n_rows) {
  same_bits_.push_back({std::move(a), a_row, std::move(b), b_row, n_rows});
}

void CaseRun::restore() {
  for (const Buffer& b : buffers_) {
    if (b.role == Role::kInOut) queue_->upload(b.initial.data(), b.tensor);
  }
}

Result<CaseRun::Readback> CaseRun::read_back() {
  DI_RETURN_IF_ERROR(queue_->sync());
  Readback r;
  for (const Buffer& b : buffers_) {
    std::vector<uint8_t>& host = r.buffers.emplace_back(b.memory.bytes());
    queue_->download(bytes_view(b.memory.data(), host.size()), host.data());
  }
  DI_RETURN_IF_ERROR(queue_->sync());
  for (const auto& [kv, check] : kv_caches_) {
    if (check != KvCheck::kCompareBlocks) continue;
    std::vector<uint8_t>& bytes = r.kv.emplace_back();
    r.kv_layouts.emplace_back(kv->layout());
    std::vector<size_t>& block_bytes = r.kv_block_bytes.emplace_back();
    std::vector<int64_t>& blocks = r.kv_blocks.emplace_back();
    for (size_t g = 0; g < kv->groups().size(); ++g) {
      const KvGroupSpec& spec = kv->groups()[g];
      block_bytes.push_back(spec.block_bytes());
      blocks.push_back(spec.n_blocks);
      for (int32_t block = 0; block < spec.n_blocks; ++block) {
        const size_t at = bytes.size();
        bytes.resize(at + spec.block_bytes());
        DI_RETURN_IF_ERROR(
            kv->read_block(static_cast<int>(g), block, std::span<uint8_t>(bytes.data() + at, spec.block_bytes())));
      }
    }
  }
  return r;
}

// ---- Comparison ----

std::string_view failure_name(Failure failure) {
  switch (failure) {
    case Failure::kNone: return "none";
    case Failure::kSetup: return "setup";
    case Failure::kReference: return "reference";
    case Failure::kGuard: return "guard";
    case Failure::kInputChanged: return "input changed";
    case Failure::kNotFinite: return "not finite";
    case Failure::kValues: return "values";
    case Failure::kSameBits: return "same bits";
  }
  return "unknown";
}

namespace {

struct Execution {
  std::unique_ptr<CaseRun> run;
  Status status;
  CaseRun::Readback data;
};

Execution execute(const OpCase& c, Backend& backend, uint64_t seed) {
  Execution e;
  e.run = std::make_unique<CaseRun>(backend, seed);
  Result<CaseOps> ops = c.build(*e.run);
  if (!ops.ok()) {
    e.status = ops.status();
    return e;
  }
  if (!e.run->status().ok()) {
    e.status = e.run->status();
    return e;
  }
  ops->op(e.run->queue());
  if (ops->after) ops->after(e.run->queue());
  Result<CaseRun::Readback> data = e.run->read_back();
  if (!data.ok()) {
    e.status = data.status();
    return e;
  }
  e.data = std::move(*data);
  return e;
}

CaseResult failed(Failure failure, std::string message) {
  CaseResult r;
  r.verdict = Verdict::kFail;
  r.failure = failure;
  r.message = std::move(message);
  return r;
}

// Guards of every buffer and host output, and the inputs unchanged: "" when all hold.
std::string check_memory(const Execution& e, Failure* failure) {
  const auto& buffers = e.run->buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    const CaseRun::Buffer& b = buffers[i];
    const std::vector<uint8_t>& host = e.data.buffers[i];
    const size_t bytes = b.tensor.bytes();
    const size_t before = first_bad_guard_byte(host.data(), b.guard);
    const size_t after = first_bad_guard_byte(host.data() + b.guard + bytes, b.guard);
    if (before < b.guard || after < b.guard) {
      *failure = Failure::kGuard;
      if (before < b.guard) {
        return "a write before the start of '" + b.name + "': its guard changed " + std::to_string(b.guard - before) +
               " bytes before it";
      }
      return "a write past the end of '" + b.name + "' (" + std::to_string(bytes) + " bytes): its guard changed " +
             std::to_string(after) + " bytes after it";
    }
  }
  for (const CaseRun::HostOutput& h : e.run->host_outputs()) {
    const size_t bytes = h.bytes.size() - 2 * h.guard;
    if (first_bad_guard_byte(h.bytes.data(), h.guard) < h.guard ||
        first_bad_guard_byte(h.bytes.data() + h.guard + bytes, h.guard) < h.guard) {
      *failure = Failure::kGuard;
      return "a download wrote outside host buffer '" + h.name + "'";
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const CaseRun::Buffer& b = buffers[i];
    if (b.role != CaseRun::Role::kInput) continue;
    const uint8_t* payload = e.data.buffers[i].data() + b.guard;
    if (std::memcmp(payload, b.initial.data(), b.initial.size()) != 0) {
      size_t at = 0;
      while (payload[at] == b.initial[at]) ++at;
      *failure = Failure::kInputChanged;
      return "input '" + b.name + "' changed at byte " + std::to_string(at) + " (the op only reads it)";
    }
  }
  return "";
}

bool is_float_output(const CaseRun::Buffer& b) {
  return b.role != CaseRun::Role::kInput && b.tensor.dtype == DType::kF32;
}

const float* payload_f32(const Execution& e, size_t i) {
  return reinterpret_cast<const float*>(e.data.buffers[i].data() + e.run->buffers()[i].guard);
}

// The reference's outputs are finite: a case feeds finite inputs, so anything else is a broken
// case or oracle.
std::string check_reference_finite(const Execution& ref) {
  const auto& buffers = ref.run->buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!is_float_output(buffers[i])) continue;
    const float* r = payload_f32(ref, i);
    for (int64_t j = 0; j < buffers[i].tensor.n_elements(); ++j) {
      if (!std::isfinite(r[j])) {
        return "the reference's '" + buffers[i].name + "' is not finite at " + element_at(j, buffers[i].tensor.cols) +
               " (a case must give finite inputs; or the reference did not write it)";
      }
    }
  }
  return "";
}

// Output i of `got`: NaN or Inf where the reference's is finite; "" when there is none.
std::string find_not_finite(const Execution& got, const Execution& ref, size_t i) {
  const CaseRun::Buffer& b = got.run->buffers()[i];
  if (b.tensor.dtype != DType::kF32) return "";
  const float* g = payload_f32(got, i);
  const float* r = payload_f32(ref, i);
  for (int64_t j = 0; j < b.tensor.n_elements(); ++j) {
    if (std::isfinite(r[j]) && !std::isfinite(g[j])) {
      return "'" + b.name + "' is " + value_string(DType::kF32, reinterpret_cast<const uint8_t*>(g + j)) + " at " +
             element_at(j, b.tensor.cols) + " where the reference has " +
             value_string(DType::kF32, reinterpret_cast<const uint8_t*>(r + j));
    }
  }
  return "";
}

// Output i of `got` against the reference's at its tolerance: "" when within it. Numeric
// outputs report their measured error in *error.
std::string compare_output(const Execution& got, const Execution& ref, size_t i, OutputError* error) {
  const CaseRun::Buffer& b = got.run->buffers()[i];
  const int64_t n = b.tensor.n_elements(), cols = b.tensor.cols;
  const uint8_t* g = got.data.buffers[i].data() + b.guard;
  const uint8_t* r = ref.data.buffers[i].data() + b.guard;
  if (b.tolerance.kind == Tolerance::Kind::kBitwise) {
    const size_t eb = element_bytes(b.tensor.dtype);
    for (int64_t j = 0; j < n; ++j) {
      if (std::memcmp(g + eb * j, r + eb * j, eb) != 0) {
        return "'" + b.name + "' differs at " + element_at(j, cols) + ": " + value_string(b.tensor.dtype, g + eb * j) +
               ", reference " + value_string(b.tensor.dtype, r + eb * j) + " (bitwise equality required)";
      }
    }
    return "";
  }
  const float* gf = reinterpret_cast<const float*>(g);
  const float* rf = reinterpret_cast<const float*>(r);
  double err2 = 0.0, ref2 = 0.0, worst = 0.0;
  int64_t worst_at = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(gf[j]) - static_cast<double>(rf[j]);
    err2 += d * d;
    ref2 += static_cast<double>(rf[j]) * rf[j];
    if (std::abs(d) > worst) {
      worst = std::abs(d);
      worst_at = j;
    }
  }
  // An all-zero reference: absolute errors.
  const double rms = ref2 > 0.0 ? std::sqrt(ref2 / static_cast<double>(n)) : 1.0;
  error->name = b.name;
  error->nmse = ref2 > 0.0 ? err2 / ref2 : err2;
  error->max_err = worst / rms;
  char buf[256];
  if (error->nmse > b.tolerance.max_nmse) {
    std::snprintf(buf, sizeof buf, "'%s': NMSE %.3g over the tolerance %.3g (largest error at ", b.name.c_str(),
                  error->nmse, b.tolerance.max_nmse);
  } else if (b.tolerance.max_err > 0.0 && error->max_err > b.tolerance.max_err) {
    std::snprintf(buf, sizeof buf, "'%s': error %.3g of the reference's RMS over the tolerance %.3g (at ",
                  b.name.c_str(), error->max_err, b.tolerance.max_err);
  } else {
    return "";
  }
  return std::string(buf) + element_at(worst_at, cols) + ": " + value_string(DType::kF32, g + 4 * worst_at) +
         ", reference " + value_string(DType::kF32, r + 4 * worst_at) + ")";
}

// Compared KV cache i: "" when every block holds the reference's bytes.
std::string compare_kv(const CaseRun::Readback& got, const CaseRun::Readback& ref, size_t i) {
  const std::vector<uint8_t>&g = got.kv[i], &r = ref.kv[i];
  if (g == r) return "";
  size_t at = 0;
  while (g[at] == r[at]) ++at;
  for (size_t group = 0; group < got.kv_block_bytes[i].size(); ++group) {
    const size_t group_bytes = got.kv_block_bytes[i][group] * static_cast<size_t>(got.kv_blocks[i][group]);
    if (at < group_bytes) {
      const size_t block_bytes = got.kv_block_bytes[i][group];
      return "KV group " + std::to_string(group) + " block " + std::to_string(at / block_bytes) + " differs at byte " +
             std::to_string(at % block_bytes) + " of the block (KvCache::read_block order; bitwise equality required)";
    }
    at -= group_bytes;
  }
  return "KV blocks differ";
}

std::string check_invariants(const Execution& e) {
  const auto& buffers = e.run->buffers();
  auto find = [&](const std::string& name) -> int {
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].name == name) return static_cast<int>(i);
    }
    DI_ICHECK(false && "same_bits names an output the case did not allocate");
    return -1;
  };
  for (const CaseRun::SameBits& s : e.run->invariants()) {
    const int a = find(s.a), b = find(s.b);
    const CaseRun::Buffer &ba = buffers[static_cast<size_t>(a)], &bb = buffers[static_cast<size_t>(b)];
    const size_t row_bytes = dtype_row_bytes(ba.tensor.dtype, ba.tensor.cols);
    DI_ICHECK(row_bytes == dtype_row_bytes(bb.tensor.dtype, bb.tensor.cols));
    DI_ICHECK(s.a_row + s.n_rows <= ba.tensor.rows && s.b_row + s.n_rows <= bb.tensor.rows);
    const uint8_t* pa = e.data.buffers[static_cast<size_t>(a)].data() + ba.guard + row_bytes * s.a_row;
    const uint8_t* pb = e.data.buffers[static_cast<size_t>(b)].data() + bb.guard + row_bytes * s.b_row;
    for (int64_t r = 0; r < s.n_rows; ++r) {
      if (std::memcmp(pa + r * row_bytes, pb + r * row_bytes, row_bytes) != 0) {
        return "row " + std::to_string(s.a_row + r) + " of '" + s.a + "' and row " + std::to_string(s.b_row + r) +
               " of '" + s.b + "' are not the same bits";
      }
    }
  }
  return "";
}

}  // namespace

CaseResult check_case(const OpCase& c, Backend& backend, Backend& reference, uint64_t seed) {
  CaseResult result;
  for (const OpUse& use : c.uses) {
    for (Backend* b : {&backend, &reference}) {
      if (!b->supports(use)) {
        result.verdict = Verdict::kSkip;
        result.message = "the " + std::string(b->name()) + " backend does not support " + describe(use);
        return result;
      }
    }
  }
  Rng mix(seed ^ fnv1a(c.label()));
  const uint64_t case_seed = mix.next();
  const Execution ref = execute(c, reference, case_seed);
  if (!ref.status.ok()) {
    return failed(Failure::kReference, "on " + std::string(reference.name()) + ": " + ref.status.to_string());
  }
  Failure failure = Failure::kNone;
  if (std::string m = check_memory(ref, &failure); !m.empty()) {
    return failed(Failure::kReference, "the reference backend: " + m);
  }
  if (std::string m = check_reference_finite(ref); !m.empty()) return failed(Failure::kReference, m);

  const Execution got = execute(c, backend, case_seed);
  if (!got.status.ok()) {
    return failed(Failure::kSetup, "on " + std::string(backend.name()) + ": " + got.status.to_string());
  }
  if (std::string m = check_memory(got, &failure); !m.empty()) return failed(failure, m);
  // Non-finite values first: they are the clearer report when an output is also wrong.
  const auto& buffers = got.run->buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].role == CaseRun::Role::kInput) continue;
    if (std::string m = find_not_finite(got, ref, i); !m.empty()) return failed(Failure::kNotFinite, m);
  }
  std::string first_problem;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].role == CaseRun::Role::kInput) continue;
    OutputError err;
    const std::string m = compare_output(got, ref, i, &err);
    if (!err.name.empty()) result.errors.push_back(err);
    if (first_problem.empty()) first_problem = m;
  }
  for (size_t i = 0; i < got.run->host_outputs().size(); ++i) {
    const CaseRun::HostOutput& h = got.run->host_outputs()[i];
    if (first_problem.empty() && h.bytes != ref.run->host_outputs()[i].bytes) {
      first_problem = "host output '" + h.name + "' differs from the reference's";
    }
  }
  std::string kv_not_compared;
  for (size_t i = 0; i < got.data.kv.size() && first_problem.empty(); ++i) {
    if (got.data.kv_layouts[i] != ref.data.kv_layouts[i]) {  // blocks not comparable byte for byte
      kv_not_compared = "KV layouts differ (" + got.data.kv_layouts[i] + ", reference " + ref.data.kv_layouts[i] +
                        "): the blocks were not compared; attention cases read them back";
      continue;
    }
    first_problem = compare_kv(got.data, ref.data, i);
  }
  if (!first_problem.empty()) {
    CaseResult r = failed(Failure::kValues, first_problem);
    r.errors = std::move(result.errors);
    return r;
  }
  if (std::string m = check_invariants(got); !m.empty()) {
    CaseResult r = failed(Failure::kSameBits, m);
    r.errors = std::move(result.errors);
    return r;
  }
  if (!kv_not_compared.empty()) {
    result.verdict = Verdict::kSkip;
    result.message = kv_not_compared;
  }
  return result;
}

PerfResult time_case(const OpCase& c, Backend& backend, int reps, uint64_t seed) {
  using Clock = std::chrono::steady_clock;
  PerfResult result;
  for (const OpUse& use : c.uses) {
    if (!backend.supports(use)) {
      result.skipped = true;
      result.message = "not supported: " + describe(use);
      return result;
    }
  }
  Rng mix(seed ^ fnv1a(c.label()));
  CaseRun run(backend, mix.next());
  Result<CaseOps> ops = c.build(run);
  Status st = ops.ok() ? run.status() : ops.status();
  Queue& q = run.queue();
  if (st.ok()) {
    ops->op(q);  // warm-up
    st = q.sync();
  }
  if (!st.ok()) {
    result.skipped = true;
    result.message = st.to_string();
    return result;
  }
  result.reps = std::max(reps, c.min_reps);
  std::vector<double> times;
  for (int r = 0; r < result.reps && st.ok(); ++r) {
    run.restore();  // in-place ops start from the same values every time (not timed)
    st = q.sync();
    const auto t = Clock::now();
    ops->op(q);
    if (st.ok()) st = q.sync();
    times.push_back(std::chrono::duration<double>(Clock::now() - t).count());
  }
  if (!st.ok()) {
    result.skipped = true;
    result.message = st.to_string();
    return result;
  }
  std::sort(times.begin(), times.end());
  const size_t m = times.size() / 2;
  result.seconds = times.size() % 2 ? times[m] : 0.5 * (times[m - 1] + times[m]);
  result.gflops = c.work.flops / result.seconds / 1e9;
  result.gbs = c.work.bytes / result.seconds / 1e9;
  return result;
}

}  // namespace deepinfer::backend::harness
