// The op harness against deliberately wrong kernels: the CPU backend behind a forwarding
// decorator that breaks one op (a wrong value, a write past the end, a NaN, a write into an
// input, a broken invariant, a missing kernel). The harness must report exactly the cases
// that use the broken op, with the right kind of failure, and pass every other case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/op_harness.h"
#include "forwarding_queue.h"
#include "core/thread_pool.h"

namespace deepinfer::backend::harness {
namespace {

enum class Fault {
  kRmsNormOneValue,     // one element of rms_norm's output off in its last bits
  kMatmulPastTheEnd,    // matmul writes one float after its output
  kAttentionNaN,        // attention returns a NaN
  kAddWritesItsInput,   // add also changes y
  kGroupNotLikeSingle,  // matmul_group's first output differs from matmul's in one ulp
  kStoreKvSwapsKV,      // store_kv stores V as K and K as V
  kNoSoftCap,           // soft_cap unsupported
  kIgnoresWindow,       // attention sees every position, not the last `window`
  kIgnoresMinPosition,  // attention reads below the sequences' min_position
};

// Everything the inner queue does, except the fault. Outputs are changed through the inner
// queue's download and upload, as a broken device kernel would leave them.
class FaultyQueue final : public testing::ForwardingQueue {
 public:
  FaultyQueue(std::unique_ptr<Queue> inner, Fault fault) : ForwardingQueue(std::move(inner)), fault_(fault) {}
  Status set_batch(const StepBatch& batch) override {
    if (fault_ != Fault::kIgnoresWindow && fault_ != Fault::kIgnoresMinPosition) return inner_->set_batch(batch);
    // Released blocks (-1) become block 0, so that a kernel reading what its queries may not
    // see reads some other rows instead of crashing.
    std::vector<StepSequence>& seqs = sequences_.emplace_back(batch.sequences.begin(), batch.sequences.end());
    for (StepSequence& s : seqs) {
      for (auto& table : s.block_tables) {
        std::vector<int32_t>& t = tables_.emplace_back(table.begin(), table.end());
        std::replace(t.begin(), t.end(), -1, 0);
        table = t;
      }
      if (fault_ == Fault::kIgnoresMinPosition) s.min_position = {};
    }
    return inner_->set_batch({batch.tokens, seqs, batch.output_rows});
  }
  void matmul(const Matrix& w, const Tensor& x, const Tensor& y, const Tensor& bias) override {
    inner_->matmul(w, x, y, bias);
    if (fault_ == Fault::kMatmulPastTheEnd) {
      const float v = 1.0f;
      inner_->upload(&v, Tensor{static_cast<uint8_t*>(y.data) + y.bytes(), DType::kF32, 1, 1});
    }
  }
  void matmul_group(std::span<const MatmulTarget> targets, const Tensor& x) override {
    inner_->matmul_group(targets, x);
    if (fault_ == Fault::kGroupNotLikeSingle) {
      change_element(targets[0].y, 0, [](float v) { return std::nextafter(v, 1e30f); });
    }
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    inner_->rms_norm(x, w, eps, out);
    if (fault_ == Fault::kRmsNormOneValue) {
      change_element(out, out.n_elements() / 2, [](float v) { return v * (1.0f + 1e-6f) + 1e-30f; });
    }
  }
  void add(const Tensor& x, const Tensor& y) override {
    inner_->add(x, y);
    if (fault_ == Fault::kAddWritesItsInput) change_element(y, 0, [](float v) { return v + 1.0f; });
  }
  void store_kv(KvCache& kv, int g, int32_t l, const Tensor& k, const Tensor& v) override {
    if (fault_ == Fault::kStoreKvSwapsKV) return inner_->store_kv(kv, g, l, v, k);
    inner_->store_kv(kv, g, l, k, v);
  }
  void attention(const AttentionParams& p, const Tensor& q, const KvCache& kv, int g, int32_t l,
                 const Tensor& out) override {
    AttentionParams params = p;
    if (fault_ == Fault::kIgnoresWindow) params.window = 0;
    inner_->attention(params, q, kv, g, l, out);
    if (fault_ == Fault::kAttentionNaN) {
      change_element(out, out.n_elements() - 1, [](float) { return std::numeric_limits<float>::quiet_NaN(); });
    }
  }

 private:
  template <typename Fn>
  void change_element(const Tensor& t, int64_t i, Fn fn) {
    const Tensor one{static_cast<float*>(t.data) + i, DType::kF32, 1, 1};
    float v = 0.0f;
    inner_->download(one, &v);
    (void)inner_->sync();
    v = fn(v);
    inner_->upload(&v, one);
  }

  Fault fault_;
  std::deque<std::vector<StepSequence>> sequences_;  // the rewritten batches' storage
  std::deque<std::vector<int32_t>> tables_;
};

class FaultyBackend final : public Backend {
 public:
  FaultyBackend(std::unique_ptr<Backend> inner, Fault fault) : inner_(std::move(inner)), fault_(fault) {}
  std::string_view name() const override { return "faulty-cpu"; }
  std::string describe() const override { return "faulty " + inner_->describe(); }
  bool supports(const OpUse& use) const override {
    if (fault_ == Fault::kNoSoftCap && use.op == Op::kSoftCap) return false;
    return inner_->supports(use);
  }
  Result<DeviceBuffer> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  std::unique_ptr<WeightStore> new_weight_store() override { return inner_->new_weight_store(); }
  Result<std::unique_ptr<KvCache>> allocate_kv(std::vector<KvGroupSpec> groups) override {
    return inner_->allocate_kv(std::move(groups));
  }
  std::unique_ptr<Queue> new_queue() override { return std::make_unique<FaultyQueue>(inner_->new_queue(), fault_); }

 private:
  std::unique_ptr<Backend> inner_;
  Fault fault_;
};

bool uses(const OpCase& c, Op op) {
  for (const OpUse& u : c.uses) {
    if (u.op == op) return true;
  }
  return c.op == op;
}

struct Expectation {
  Fault fault;
  const char* what;
  // Which cases the fault shows in, and how.
  bool (*affected)(const OpCase&);
  Verdict verdict;
  Failure failure;
};

const Expectation kExpectations[] = {
    {Fault::kRmsNormOneValue, "rms_norm off by one element",
     [](const OpCase& c) { return uses(c, Op::kRmsNorm); }, Verdict::kFail, Failure::kValues},
    // matmul_group cases run matmul too (the outputs they must equal).
    {Fault::kMatmulPastTheEnd, "matmul writes past its output",
     [](const OpCase& c) { return c.op == Op::kMatmul; }, Verdict::kFail, Failure::kGuard},
    {Fault::kAttentionNaN, "attention returns NaN", [](const OpCase& c) { return uses(c, Op::kAttention); },
     Verdict::kFail, Failure::kNotFinite},
    {Fault::kAddWritesItsInput, "add writes its input", [](const OpCase& c) { return uses(c, Op::kAdd); },
     Verdict::kFail, Failure::kInputChanged},
    {Fault::kGroupNotLikeSingle, "matmul_group differs from matmul in one ulp",
     [](const OpCase& c) { return c.op == Op::kMatmul && c.name.rfind("group ", 0) == 0; }, Verdict::kFail,
     Failure::kSameBits},
    // Attention reads K and V through store_kv, so its cases see the swap too.
    {Fault::kStoreKvSwapsKV, "store_kv swaps K and V", [](const OpCase& c) { return uses(c, Op::kStoreKv); },
     Verdict::kFail, Failure::kValues},
    // The rows a window or min_position hides hold poison (op_cases.cpp): reading them shows.
    {Fault::kIgnoresWindow, "attention ignores the window",
     [](const OpCase& c) { return c.op == Op::kAttention && c.name.find(" window ") != std::string::npos; },
     Verdict::kFail, Failure::kValues},
    // The V4 CSA chain's replay case: its sparse attention starts at a min_position too.
    {Fault::kIgnoresMinPosition, "attention ignores min_position",
     [](const OpCase& c) {
       return (c.op == Op::kAttention && c.name.find(" min ") != std::string::npos) ||
              c.name.find("csa chain f32 kv, replay") != std::string::npos;
     },
     Verdict::kFail, Failure::kValues},
    {Fault::kNoSoftCap, "no soft_cap kernel", [](const OpCase& c) { return uses(c, Op::kSoftCap); }, Verdict::kSkip,
     Failure::kNone},
};

class HarnessCatches : public ::testing::TestWithParam<Expectation> {};

TEST_P(HarnessCatches, TheCasesOfTheBrokenOpAndNoOther) {
  const Expectation& e = GetParam();
  ThreadPool pool(2);
  FaultyBackend faulty(std::move(create_backend("cpu", {&pool})).value(), e.fault);
  auto reference = std::move(create_backend("cpu-reference", {&pool})).value();
  int n_affected = 0;
  for (const OpCase& c : op_cases(CaseSet::kCi)) {
    // The small cases show every fault; the large products only cost time (under sanitizers).
    if (c.work.flops > 1e7) continue;
    const CaseResult r = check_case(c, faulty, *reference);
    const std::string got = std::string(failure_name(r.failure)) + ": " + r.message;
    if (e.affected(c)) {
      ++n_affected;
      EXPECT_EQ(r.verdict, e.verdict) << e.what << ": " << c.label() << " -> " << got;
      EXPECT_EQ(r.failure, e.failure) << e.what << ": " << c.label() << " -> " << got;
    } else {
      EXPECT_EQ(r.verdict, Verdict::kPass) << e.what << ": " << c.label() << " -> " << got;
    }
  }
  EXPECT_GT(n_affected, 0) << e.what << ": no case exercises it";
}

INSTANTIATE_TEST_SUITE_P(Faults, HarnessCatches, ::testing::ValuesIn(kExpectations),
                         [](const ::testing::TestParamInfo<Expectation>& info) {
                           return "Fault" + std::to_string(static_cast<int>(info.param.fault));
                         });

// The messages name the output and where it went wrong.
TEST(HarnessReports, WhereAndHow) {
  ThreadPool pool(1);
  auto reference = std::move(create_backend("cpu-reference", {&pool})).value();
  auto find = [](Op op) {
    for (OpCase& c : op_cases(CaseSet::kCi)) {
      if (c.op == op) return c;
    }
    return OpCase{};
  };
  FaultyBackend past_end(std::move(create_backend("cpu", {&pool})).value(), Fault::kMatmulPastTheEnd);
  CaseResult r = check_case(find(Op::kMatmul), past_end, *reference);
  EXPECT_NE(r.message.find("a write past the end of 'y'"), std::string::npos) << r.message;
  FaultyBackend one_value(std::move(create_backend("cpu", {&pool})).value(), Fault::kRmsNormOneValue);
  r = check_case(find(Op::kRmsNorm), one_value, *reference);
  EXPECT_NE(r.message.find("'out' differs at element 288 (row 0, col 288)"), std::string::npos) << r.message;
  FaultyBackend nan(std::move(create_backend("cpu", {&pool})).value(), Fault::kAttentionNaN);
  r = check_case(find(Op::kAttention), nan, *reference);
  EXPECT_NE(r.message.find("'out' is nan at"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace deepinfer::backend::harness
