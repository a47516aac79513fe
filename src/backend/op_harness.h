// The op harness: one table of op cases, each run through the Queue on a backend under test and
// on "cpu-reference" (the scalar oracle) and compared at a tolerance chosen for its op, as
// llama.cpp's test-backend-ops does; and a perf mode that times a case on one backend.
//
// A case (OpCase) builds its tensors through a CaseRun and hands back the op to run. Every
// buffer it allocates lies between two guard regions filled with a sentinel (through
// Backend::allocate and Queue::upload); outputs start as NaN, so an element an op forgot stays
// visible. After the run the runner downloads every buffer and fails the case when
//   - a guard changed (a write outside the buffer), or an input the op only reads changed;
//   - an output holds NaN or Inf where the reference's is finite;
//   - an output differs from the reference's beyond its Tolerance: bitwise where the op's
//     contract fixes every bit (copies, add, scale, rms_norm, rope, KV stores, MoE dispatch),
//     else normalised mean squared error and largest error over the reference's RMS;
//   - two outputs the case declares equal within one backend (batch invariance, matmul_group
//     against matmul) are not the same bits.
// A case whose OpUses the backend does not support is skipped, not failed.
//
// The runner reaches backends only through backend.h: a new backend joins the harness by being
// created by name (create_backend). The case table is op_cases(); docs/adding-an-op.md says how
// to add to it. Inputs come from a generator seeded by the run's seed and the case's name, so
// every backend (and every run) sees the same values. Not thread-safe: one case at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::backend::harness {

// How an output is compared with the reference's.
struct Tolerance {
  enum class Kind { kBitwise, kNumeric };
  Kind kind = Kind::kBitwise;
  double max_nmse = 0.0;  // sum (x - r)^2 / sum r^2
  double max_err = 0.0;   // max |x - r| / rms(r): catches one wrong element NMSE averages away; 0: unchecked

  static Tolerance bitwise() { return {}; }
  static Tolerance numeric(double max_nmse, double max_err) { return {Kind::kNumeric, max_nmse, max_err}; }
};

// What one run of a case's op computes and moves. Perf mode reports GB/s for memory-bound cases
// (one-token products, decode attention, elementwise ops), else GFLOP/s.
enum class Bound { kCompute, kMemory };
struct Work {
  double flops = 0.0;
  double bytes = 0.0;
  Bound bound = Bound::kCompute;
};

// Deterministic values (splitmix64): the same seed gives the same stream on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  float uniform(float lo, float hi);         // [lo, hi)
  int64_t below(int64_t n);                  // [0, n)
  std::vector<float> uniform(size_t n, float lo, float hi);
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(below(static_cast<int64_t>(i)))]);
  }

 private:
  uint64_t state_;
};

// One sequence of a step (StepSequence with owned tables): per KV group, its block table and
// optionally its min_position and first_write (missing entries are 0).
struct SequenceSpec {
  int64_t n_tokens = 0;
  int64_t first_position = 0;
  std::vector<std::vector<int32_t>> block_tables;
  std::vector<int64_t> min_position;
  std::vector<int64_t> first_write;
};

struct BatchSpec {
  std::vector<int32_t> tokens;  // empty: zeros, one per token of the sequences
  std::vector<SequenceSpec> sequences;
  std::vector<int32_t> output_rows;
};

using Enqueue = std::function<void(Queue&)>;

// What a case's build hands back: the op under test (perf mode times it, repeated) and, in check
// mode only, ops enqueued after it whose outputs must repeat the op's bits (CaseRun::same_bits).
struct CaseOps {
  Enqueue op;
  Enqueue after;
};

class CaseRun;

struct OpCase {
  Op op = Op::kUpload;
  std::string name;         // shapes and variants, unique within the op: "q4_K 48x512 t5 bias"
  std::vector<OpUse> uses;  // every op and element type the case enqueues (supports() is asked)
  Work work;
  int min_reps = 1;         // perf mode times max(R, min_reps) repetitions
  // Allocates and fills the case's tensors through `run`, enqueues what the op needs first
  // (set_batch, filling a KV cache) and returns the op.
  std::function<Result<CaseOps>(CaseRun&)> build;

  std::string label() const;  // "matmul q4_K 48x512 t5 bias"
};

// One case being built and run on one backend. Everything the case allocates goes through it, so
// the runner can lay guards around each buffer, keep copies of the inputs and read back outputs.
// An allocation that fails returns an empty tensor and sets status(): a case checks status()
// before it enqueues anything.
class CaseRun {
 public:
  CaseRun(Backend& backend, uint64_t seed);
  ~CaseRun();
  CaseRun(const CaseRun&) = delete;
  CaseRun& operator=(const CaseRun&) = delete;

  Backend& backend() { return backend_; }
  Queue& queue() { return *queue_; }
  Rng& rng() { return rng_; }
  const Status& status() const { return status_; }

  // A tensor the op only reads, holding `host` (rows * row bytes of dtype). Checked unchanged.
  Tensor input(std::string name, DType dtype, int64_t rows, int64_t cols, const void* host);
  Tensor input(std::string name, int64_t rows, int64_t cols, std::span<const float> values);
  Tensor input(std::string name, int64_t rows, int64_t cols, std::span<const int32_t> values);
  // A tensor the op writes: NaN (or a sentinel for non-float types) until it does, then compared.
  Tensor output(std::string name, DType dtype, int64_t rows, int64_t cols, Tolerance tolerance);
  // A tensor the op updates in place: `values` before, compared after (and restored before each
  // perf repetition).
  Tensor inout(std::string name, int64_t rows, int64_t cols, std::span<const float> values, Tolerance tolerance);
  // Host memory a download writes: `bytes` bytes between host guards, compared bitwise.
  void* host_output(std::string name, size_t bytes);

  // A weight matrix of `dtype` with deterministic contents: plain types hold uniform values,
  // block formats random codes under sane scales. Through the backend's WeightStore.
  Matrix matrix(std::string name, DType dtype, int64_t n_out, int64_t n_in);
  // A float32 vector in the WeightStore (norm weights, biases, rope frequencies).
  Tensor vector(std::span<const float> values);
  // A KV cache; with kCompareBlocks every block of every group is read back after the run and
  // compared bitwise with the reference's (when both caches have the same layout).
  enum class KvCheck { kNone, kCompareBlocks };
  KvCache* kv_cache(std::vector<KvGroupSpec> groups, KvCheck check);
  // set_batch with storage that lives as long as this run.
  Status set_batch(BatchSpec spec);

  // Rows [a_row, a_row + n_rows) of output `a` must hold the same bits as those of output `b`
  // on the backend under test (outputs of this run, by name).
  void same_bits(std::string a, int64_t a_row, std::string b, int64_t b_row, int64_t n_rows);

  // ---- For the runner ----
  enum class Role { kInput, kOutput, kInOut };
  struct Buffer {
    std::string name;
    Role role = Role::kInput;
    Tensor tensor;         // the payload, between the guards
    Tolerance tolerance;
    DeviceBuffer memory;   // guard, payload, guard
    size_t guard = 0;      // bytes of each guard
    std::vector<uint8_t> initial;  // the payload as uploaded (inputs and in-place tensors)
  };
  struct HostOutput {
    std::string name;
    std::vector<uint8_t> bytes;  // guard, payload, guard
    size_t guard = 0;
  };
  struct Readback {
    std::vector<std::vector<uint8_t>> buffers;  // whole buffers (guards included), buffers() order
    std::vector<std::vector<uint8_t>> kv;       // per compared cache: every block of every group
    std::vector<std::string> kv_layouts;
    std::vector<std::vector<size_t>> kv_block_bytes;  // per compared cache, per group
    std::vector<std::vector<int64_t>> kv_blocks;
  };
  struct SameBits {
    std::string a;
    int64_t a_row = 0;
    std::string b;
    int64_t b_row = 0;
    int64_t n_rows = 0;
  };
  const std::deque<Buffer>& buffers() const { return buffers_; }
  const std::deque<HostOutput>& host_outputs() const { return host_outputs_; }
  const std::vector<SameBits>& invariants() const { return same_bits_; }
  // Re-uploads the values of in-place tensors (perf mode, between repetitions).
  void restore();
  // Syncs the queue and downloads every buffer and compared KV cache.
  Result<Readback> read_back();

 private:
  Tensor allocate(std::string name, Role role, DType dtype, int64_t rows, int64_t cols, const void* initial,
                  Tolerance tolerance);

  Backend& backend_;
  Rng rng_;
  Status status_;
  std::unique_ptr<Queue> queue_;
  std::unique_ptr<WeightStore> weights_;
  std::deque<std::vector<uint8_t>> weight_bytes_;  // add_matrix may read them in place
  std::deque<Buffer> buffers_;
  std::deque<HostOutput> host_outputs_;
  std::vector<std::pair<std::unique_ptr<KvCache>, KvCheck>> kv_caches_;
  std::deque<BatchSpec> batches_;                  // set_batch's spans point into these
  std::deque<std::vector<StepSequence>> steps_;
  std::vector<SameBits> same_bits_;
};

// ---- Running cases ----

enum class Verdict { kPass, kFail, kSkip };

enum class Failure {
  kNone,
  kSetup,         // the case could not be built or its queue reported an error
  kReference,     // the reference itself misbehaved (a broken case or oracle)
  kGuard,         // a write outside a buffer
  kInputChanged,  // an input the op only reads was modified
  kNotFinite,     // NaN or Inf where the reference has a finite value
  kValues,        // beyond the tolerance
  kSameBits,      // an in-backend invariant (batch invariance, group == single) broke
};
std::string_view failure_name(Failure failure);

// The measured error of one numeric output.
struct OutputError {
  std::string name;
  double nmse = 0.0;
  double max_err = 0.0;
};

struct CaseResult {
  Verdict verdict = Verdict::kPass;
  Failure failure = Failure::kNone;
  std::string message;  // the skip reason, or the first problem found (output, element, values)
  std::vector<OutputError> errors;
};

inline constexpr uint64_t kDefaultSeed = 20250611;

// Runs `c` on `backend` and on `reference` and compares them.
CaseResult check_case(const OpCase& c, Backend& backend, Backend& reference, uint64_t seed = kDefaultSeed);

struct PerfResult {
  bool skipped = false;
  std::string message;  // why it was skipped or failed to build
  int reps = 0;
  double seconds = 0.0;  // median over the repetitions of one op + sync
  double gflops = 0.0;   // work.flops / seconds / 1e9
  double gbs = 0.0;      // work.bytes / seconds / 1e9
};

// Times `c` on `backend`: one warm-up, then max(reps, c.min_reps) timed runs.
PerfResult time_case(const OpCase& c, Backend& backend, int reps, uint64_t seed = kDefaultSeed);

// ---- The case table (op_cases.cpp) ----

enum class CaseSet {
  kCi,    // every op, every weight format, the awkward shapes: seconds on two cores
  kFull,  // kCi and larger shapes (DEEPINFER_OPS_FULL=1 in tests/ops)
  kPerf,  // perf-sized cases for deepinfer bench ops
};
std::vector<OpCase> op_cases(CaseSet set);

}  // namespace deepinfer::backend::harness
