// The op harness's case table: every op of the Queue, every weight format, and the shapes that
// break kernels (tails that are not multiples of 16 or of a block, packed and unpacked weights,
// GQA ratios, block sizes that do not divide a sequence, scattered block tables, windows, SWA
// replay's min_position, routing ties). To add a case, append it to the op's list in
// check_cases() (or perf_cases()); to add an op, write its case builder beside the others
// (docs/adding-an-op.md).
//
// Tolerances are chosen per op. Bitwise where the contract fixes every bit: copies (embed of
// float tables, gather_output_rows, moe_gather, store_kv, upload/download), integer results
// (routing ids, dispatch) and the ops whose operations and order backend.h states (add, scale,
// rms_norm, rope). Products, attention and vector transcendentals round in an order the kernel
// chooses: NMSE plus the largest error over the reference's RMS, 10x (the largest errors of the
// full table, n_in 4096) to 100x above what the fast CPU path measures, and far below what one
// wrong element, row or block gives (DEEPINFER_OPS_VERBOSE=1 in tests/ops prints them).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>

#include "backend/op_harness.h"
#include "core/check.h"

namespace deepinfer::backend::harness {

namespace {

// Float products: fast and reference paths quantize activations alike and differ only in the
// order of float sums.
const Tolerance kProduct = Tolerance::numeric(1e-10, 1e-4);
// Online softmax in tiles against one key at a time.
const Tolerance kAttention = Tolerance::numeric(1e-10, 1e-4);
// Vector exp (SiLU, and tanh GELU through it) against libm's.
const Tolerance kActivation = Tolerance::numeric(1e-12, 1e-5);
// libm's tanh and exp on both sides today; a device's own may differ in the last bits.
const Tolerance kTranscendental = Tolerance::numeric(1e-12, 1e-5);
// Dequantization: scale times code, exact in float for every format but the fused k-quant
// forms (d * sc * q - dmin * m) a device may contract differently.
const Tolerance kDequantized = Tolerance::numeric(1e-12, 1e-5);
// Sums of a few weighted rows in a fixed order.
const Tolerance kWeightedSum = Tolerance::numeric(1e-12, 1e-5);

constexpr DType kWeightFormats[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                                    DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                                    DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

std::string strf(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

long long ll(int64_t v) { return static_cast<long long>(v); }

int64_t block_of(DType t) { return dtype_traits(t)->block_size; }
bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
double matrix_bytes(DType t, int64_t n_out, int64_t n_in) {
  return static_cast<double>(dtype_row_bytes(t, n_in)) * static_cast<double>(n_out);
}

std::vector<int32_t> iota(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i);
  return v;
}

// n_tokens * k (token, slot) pairs sorted by expert, stable: what moe_dispatch computes, as
// inputs for the ops after it.
std::vector<int32_t> dispatch_order(const std::vector<int32_t>& ids) {
  std::vector<int32_t> order = iota(static_cast<int64_t>(ids.size()));
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  return order;
}

// k distinct experts per token out of the first n_used of n_expert (the rest get no tokens).
std::vector<int32_t> random_routes(Rng& rng, int64_t n_tokens, int64_t k, int64_t n_used) {
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<int32_t> experts = iota(n_used);
    rng.shuffle(experts);
    ids.insert(ids.end(), experts.begin(), experts.begin() + k);
  }
  return ids;
}

// One sequence of `n` tokens at positions first.. in a batch without KV.
BatchSpec plain_batch(int64_t n, std::vector<int32_t> tokens = {}, std::vector<int32_t> output_rows = {}) {
  BatchSpec b;
  b.tokens = std::move(tokens);
  b.sequences.push_back({n, 0, {}, {}, {}});
  b.output_rows = std::move(output_rows);
  return b;
}

// ---- Products ----

enum class Bias { kNone, kAdded };

OpCase matmul_case(DType type, int64_t n_out, int64_t n_in, int64_t n_tokens, Bias with) {
  const bool bias = with == Bias::kAdded;
  OpCase c;
  c.op = Op::kMatmul;
  c.name = strf("%s %lldx%lld t%lld%s", dtype_name(type).data(), ll(n_out), ll(n_in), ll(n_tokens),
                bias ? " bias" : "");
  c.uses = {{Op::kMatmul, type}};
  c.work = {2.0 * n_out * n_in * n_tokens, matrix_bytes(type, n_out, n_in) + 4.0 * n_tokens * (n_in + n_out),
            n_tokens == 1 ? Bound::kMemory : Bound::kCompute};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Matrix w = run.matrix("w", type, n_out, n_in);
    const Tensor x = run.input("x", n_tokens, n_in, run.rng().uniform(static_cast<size_t>(n_tokens * n_in), -1, 1));
    const Tensor b = bias ? run.vector(run.rng().uniform(static_cast<size_t>(n_out), -1, 1)) : Tensor{};
    const Tensor y = run.output("y", DType::kF32, n_tokens, n_out, kProduct);
    // Batch invariance: a row alone gives the bits it gets in the batch.
    const int64_t row = n_tokens / 2;
    const Tensor alone = n_tokens > 1 ? run.output("y alone", DType::kF32, 1, n_out, kProduct) : Tensor{};
    DI_RETURN_IF_ERROR(run.status());
    CaseOps ops;
    ops.op = [=](Queue& q) { q.matmul(w, x, y, b); };
    if (n_tokens > 1) {
      run.same_bits("y", row, "y alone", 0, 1);
      ops.after = [=](Queue& q) { q.matmul(w, x.view_rows(row, 1), alone, b); };
    }
    return ops;
  };
  return c;
}

// The greedy ids of y = x Wᵀ without y (an output head's argmax): bitwise the reference's
// (its products, then the first maximum of each row), and a row alone gets the id it gets in
// the batch.
OpCase matmul_argmax_case(DType type, int64_t n_out, int64_t n_in, int64_t n_tokens) {
  OpCase c;
  c.op = Op::kMatmulArgmax;
  c.name = strf("%s %lldx%lld t%lld", dtype_name(type).data(), ll(n_out), ll(n_in), ll(n_tokens));
  c.uses = {{Op::kMatmulArgmax, type}};
  c.work = {2.0 * n_out * n_in * n_tokens, matrix_bytes(type, n_out, n_in) + 4.0 * n_tokens * (n_in + 1),
            n_tokens == 1 ? Bound::kMemory : Bound::kCompute};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Matrix w = run.matrix("w", type, n_out, n_in);
    const Tensor x = run.input("x", n_tokens, n_in, run.rng().uniform(static_cast<size_t>(n_tokens * n_in), -1, 1));
    const Tensor best = run.output("best", DType::kI32, n_tokens, 1, Tolerance::bitwise());
    const int64_t row = n_tokens / 2;
    const Tensor alone = n_tokens > 1 ? run.output("best alone", DType::kI32, 1, 1, Tolerance::bitwise()) : Tensor{};
    DI_RETURN_IF_ERROR(run.status());
    CaseOps ops;
    ops.op = [=](Queue& q) { q.matmul_argmax(w, x, best); };
    if (n_tokens > 1) {
      run.same_bits("best", row, "best alone", 0, 1);
      ops.after = [=](Queue& q) { q.matmul_argmax(w, x.view_rows(row, 1), alone); };
    }
    return ops;
  };
  return c;
}

// Several products of one x, each matrix in its own format (Q4_K_M files mix Q4_K and Q6_K in
// one layer's q/k/v); each output must also equal a lone matmul's bits.
OpCase matmul_group_case(std::vector<DType> types, std::vector<int64_t> n_outs, int64_t n_in, int64_t n_tokens) {
  DI_ICHECK(types.size() == n_outs.size());
  OpCase c;
  c.op = Op::kMatmul;
  std::string outs, formats;
  double flops = 0, bytes = 4.0 * n_tokens * n_in;
  for (size_t i = 0; i < n_outs.size(); ++i) {
    outs += strf("%s%lld", outs.empty() ? "" : "+", ll(n_outs[i]));
    if (i == 0 || types[i] != types[i - 1]) {
      formats += strf("%s%s", formats.empty() ? "" : "+", dtype_name(types[i]).data());
    }
    flops += 2.0 * n_outs[i] * n_in * n_tokens;
    bytes += matrix_bytes(types[i], n_outs[i], n_in) + 4.0 * n_tokens * n_outs[i];
    c.uses.push_back({Op::kMatmul, types[i]});
  }
  c.name = strf("group %s (%s)x%lld t%lld", formats.c_str(), outs.c_str(), ll(n_in), ll(n_tokens));
  c.work = {flops, bytes, n_tokens == 1 ? Bound::kMemory : Bound::kCompute};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor x = run.input("x", n_tokens, n_in, run.rng().uniform(static_cast<size_t>(n_tokens * n_in), -1, 1));
    std::vector<Matrix> ws;
    std::vector<Tensor> ys, alone, biases;
    for (size_t i = 0; i < n_outs.size(); ++i) {
      ws.push_back(run.matrix(strf("w%zu", i), types[i], n_outs[i], n_in));
      // Bias on the first output only, as q/k/v with and without bias mix in real models.
      biases.push_back(i == 0 ? run.vector(run.rng().uniform(static_cast<size_t>(n_outs[i]), -1, 1)) : Tensor{});
      ys.push_back(run.output(strf("y%zu", i), DType::kF32, n_tokens, n_outs[i], kProduct));
      alone.push_back(run.output(strf("z%zu", i), DType::kF32, n_tokens, n_outs[i], kProduct));
      run.same_bits(strf("y%zu", i), 0, strf("z%zu", i), 0, n_tokens);
    }
    DI_RETURN_IF_ERROR(run.status());
    CaseOps ops;
    ops.op = [=](Queue& q) {
      std::vector<MatmulTarget> targets;
      for (size_t i = 0; i < ws.size(); ++i) targets.push_back({&ws[i], ys[i], biases[i]});
      q.matmul_group(targets, x);
    };
    ops.after = [=](Queue& q) {
      for (size_t i = 0; i < ws.size(); ++i) q.matmul(ws[i], x, alone[i], biases[i]);
    };
    return ops;
  };
  return c;
}

OpCase embed_case(DType type, int64_t n_vocab, int64_t n_embd, std::vector<int32_t> tokens) {
  OpCase c;
  c.op = Op::kEmbed;
  const auto n = static_cast<int64_t>(tokens.size());
  c.name = strf("%s %lldx%lld t%lld", dtype_name(type).data(), ll(n_vocab), ll(n_embd), ll(n));
  c.uses = {{Op::kEmbed, type}};
  c.work = {0.0, static_cast<double>(n) * (static_cast<double>(dtype_row_bytes(type, n_embd)) + 4.0 * n_embd), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Matrix table = run.matrix("table", type, n_vocab, n_embd);
    const Tensor out =
        run.output("out", DType::kF32, n, n_embd, is_float(type) ? Tolerance::bitwise() : kDequantized);
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(run.set_batch(plain_batch(n, tokens)));
    return CaseOps{[=](Queue& q) { q.embed(table, out); }, {}};
  };
  return c;
}

// Rows [offsets[e], offsets[e + 1]) of x times expert e, for one or two targets (down; gate+up).
OpCase grouped_matmul_case(DType type, std::vector<int32_t> counts, int64_t n_in, std::vector<int64_t> n_outs) {
  OpCase c;
  c.op = Op::kGroupedMatmul;
  int64_t rows = 0;
  std::string cs;
  for (int32_t n : counts) {
    rows += n;
    cs += strf("%s%d", cs.empty() ? "" : ",", n);
  }
  std::string outs;
  double flops = 0, bytes = 4.0 * rows * n_in;
  for (int64_t n : n_outs) {
    outs += strf("%s%lld", outs.empty() ? "" : "+", ll(n));
    flops += 2.0 * n * n_in * rows;
    bytes += static_cast<double>(counts.size()) * matrix_bytes(type, n, n_in) + 4.0 * rows * n;
  }
  c.name = strf("%s %zu experts (%s)x%lld rows [%s]", dtype_name(type).data(), counts.size(), outs.c_str(), ll(n_in),
                cs.c_str());
  c.uses = {{Op::kGroupedMatmul, type}};
  c.work = {flops, bytes, Bound::kCompute};
  const auto n_expert = static_cast<int64_t>(counts.size());
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    std::vector<int32_t> offsets{0};
    for (int32_t n : counts) offsets.push_back(offsets.back() + n);
    const Tensor off = run.input("offsets", 1, n_expert + 1, offsets);
    const Tensor x = run.input("x", rows, n_in, run.rng().uniform(static_cast<size_t>(rows * n_in), -1, 1));
    std::vector<std::vector<Matrix>> experts(n_outs.size());
    std::vector<Tensor> ys;
    for (size_t t = 0; t < n_outs.size(); ++t) {
      for (int64_t e = 0; e < n_expert; ++e) {
        experts[t].push_back(run.matrix(strf("w%zu.%lld", t, ll(e)), type, n_outs[t], n_in));
      }
      ys.push_back(run.output(strf("y%zu", t), DType::kF32, rows, n_outs[t], kProduct));
    }
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) {
                     std::vector<GroupedTarget> targets;
                     for (size_t t = 0; t < ys.size(); ++t) targets.push_back({experts[t], ys[t]});
                     q.grouped_matmul(targets, off, x);
                   },
                   {}};
  };
  return c;
}

// ---- Elementwise and row ops ----

// Rows scaled over three decades, so a norm's reduction meets small and large sums.
std::vector<float> spread_rows(Rng& rng, int64_t rows, int64_t cols) {
  std::vector<float> v = rng.uniform(static_cast<size_t>(rows * cols), -2, 2);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::pow(10.0f, static_cast<float>(r % 3) - 1.0f);
    for (int64_t i = 0; i < cols; ++i) v[static_cast<size_t>(r * cols + i)] *= s;
  }
  return v;
}

enum class Placement { kOutOfPlace, kInPlace };

OpCase rms_norm_case(int64_t rows, int64_t n, float eps, Placement placement) {
  const bool in_place = placement == Placement::kInPlace;
  OpCase c;
  c.op = Op::kRmsNorm;
  c.name = strf("%lldx%lld eps %g%s", ll(rows), ll(n), static_cast<double>(eps), in_place ? " in place" : "");
  c.uses = {{Op::kRmsNorm}};
  c.work = {3.0 * rows * n, 4.0 * (2.0 * rows * n + n), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const std::vector<float> xv = spread_rows(run.rng(), rows, n);
    const Tensor w = run.vector(run.rng().uniform(static_cast<size_t>(n), 0.5f, 1.5f));
    const Tensor x = in_place ? run.inout("x", rows, n, xv, Tolerance::bitwise()) : run.input("x", rows, n, xv);
    const Tensor out = in_place ? x : run.output("out", DType::kF32, rows, n, Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.rms_norm(x, w, eps, out); }, {}};
  };
  return c;
}

struct TokenSpan {
  int64_t n_tokens;
  int64_t first_position;
};

BatchSpec spans_batch(const std::vector<TokenSpan>& spans) {
  BatchSpec b;
  for (const TokenSpan& s : spans) b.sequences.push_back({s.n_tokens, s.first_position, {}, {}, {}});
  return b;
}

std::vector<float> inv_freq(double theta, int64_t n_rot) {
  std::vector<float> f(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = static_cast<float>(std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)));
  }
  return f;
}

OpCase rope_case(RopePairing pairing, int64_t n_heads, int64_t head_dim, int64_t n_rot, double theta,
                 std::vector<TokenSpan> spans) {
  OpCase c;
  c.op = Op::kRope;
  int64_t n = 0;
  std::string at;
  for (const TokenSpan& s : spans) {
    n += s.n_tokens;
    at += strf("%s%lld@%lld", at.empty() ? "" : ",", ll(s.n_tokens), ll(s.first_position));
  }
  c.name = strf("%s %lldx%lld rot %lld theta %g tokens %s",
                pairing == RopePairing::kInterleaved ? "interleaved" : "half", ll(n_heads), ll(head_dim), ll(n_rot),
                theta, at.c_str());
  c.uses = {{Op::kRope, DType::kF32, static_cast<int>(pairing)}};
  c.work = {6.0 * n * n_heads * n_rot / 2, 8.0 * n * n_heads * head_dim, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const int64_t cols = n_heads * head_dim;
    const Tensor x = run.inout("x", n, cols, run.rng().uniform(static_cast<size_t>(n * cols), -1, 1),
                               Tolerance::bitwise());
    const Tensor f = run.vector(inv_freq(theta, n_rot));
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(run.set_batch(spans_batch(spans)));
    const RopeParams p{n_heads, head_dim, n_rot, pairing};
    return CaseOps{[=](Queue& q) { q.rope(x, p, f); }, {}};
  };
  return c;
}

// Uniform values in [-range, range] with a few far out (exp and tanh overflow in the kernels'
// approximations).
std::vector<float> with_extremes(Rng& rng, int64_t n, float range) {
  std::vector<float> v = rng.uniform(static_cast<size_t>(n), -range, range);
  const float far[] = {-90.0f, 90.0f, -30.0f, 30.0f, -9.5f, 12.25f, 0.0f, -0.0f};
  for (size_t i = 0; i < std::size(far) && i * 7 < v.size(); ++i) v[i * 7] = far[i];
  return v;
}

OpCase gated_case(Activation act, int64_t rows, int64_t cols) {
  OpCase c;
  c.op = Op::kGatedActivation;
  c.name = strf("%s %lldx%lld", act == Activation::kSilu ? "silu" : "gelu_tanh", ll(rows), ll(cols));
  c.uses = {{Op::kGatedActivation, DType::kF32, static_cast<int>(act)}};
  c.work = {10.0 * rows * cols, 12.0 * rows * cols, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor gate = run.inout("gate", rows, cols, with_extremes(run.rng(), rows * cols, 8.0f), kActivation);
    const Tensor up = run.input("up", rows, cols, run.rng().uniform(static_cast<size_t>(rows * cols), -2, 2));
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.gated_activation(act, gate, up); }, {}};
  };
  return c;
}

OpCase add_case(int64_t rows, int64_t cols) {
  OpCase c;
  c.op = Op::kAdd;
  c.name = strf("%lldx%lld", ll(rows), ll(cols));
  c.uses = {{Op::kAdd}};
  c.work = {1.0 * rows * cols, 12.0 * rows * cols, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const auto n = static_cast<size_t>(rows * cols);
    const Tensor x = run.inout("x", rows, cols, run.rng().uniform(n, -4, 4), Tolerance::bitwise());
    const Tensor y = run.input("y", rows, cols, run.rng().uniform(n, -4, 4));
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.add(x, y); }, {}};
  };
  return c;
}

OpCase scale_case(int64_t rows, int64_t cols, float factor) {
  OpCase c;
  c.op = Op::kScale;
  c.name = strf("%lldx%lld by %g", ll(rows), ll(cols), static_cast<double>(factor));
  c.uses = {{Op::kScale}};
  c.work = {1.0 * rows * cols, 8.0 * rows * cols, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor x = run.inout("x", rows, cols, run.rng().uniform(static_cast<size_t>(rows * cols), -4, 4),
                               Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.scale(x, factor); }, {}};
  };
  return c;
}

OpCase soft_cap_case(int64_t rows, int64_t cols, float cap) {
  OpCase c;
  c.op = Op::kSoftCap;
  c.name = strf("%lldx%lld cap %g", ll(rows), ll(cols), static_cast<double>(cap));
  c.uses = {{Op::kSoftCap}};
  c.work = {20.0 * rows * cols, 8.0 * rows * cols, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor x = run.inout("x", rows, cols, with_extremes(run.rng(), rows * cols, 4.0f * cap), kTranscendental);
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.soft_cap(x, cap); }, {}};
  };
  return c;
}

OpCase gather_output_rows_case(int64_t n_tokens, int64_t cols, std::vector<int32_t> rows) {
  OpCase c;
  c.op = Op::kGatherOutputRows;
  c.name = strf("%lld of %lldx%lld", ll(static_cast<int64_t>(rows.size())), ll(n_tokens), ll(cols));
  c.uses = {{Op::kGatherOutputRows}};
  c.work = {0.0, 8.0 * static_cast<double>(rows.size()) * cols, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const auto n_rows = static_cast<int64_t>(rows.size());
    const Tensor x = run.input("x", n_tokens, cols, run.rng().uniform(static_cast<size_t>(n_tokens * cols), -1, 1));
    const Tensor out = run.output("out", DType::kF32, n_rows, cols, Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(run.set_batch(plain_batch(n_tokens, {}, rows)));
    return CaseOps{[=](Queue& q) { q.gather_output_rows(x, out); }, {}};
  };
  return c;
}

// Host <-> device copies of views that start and end off any alignment.
OpCase upload_case(int64_t rows, int64_t first, int64_t n) {
  OpCase c;
  c.op = Op::kUpload;
  c.name = strf("bytes %lld..%lld of %lld", ll(first), ll(first + n), ll(rows));
  c.uses = {{Op::kUpload}};
  c.work = {0.0, static_cast<double>(n), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor dst = run.output("dst", DType::kI8, rows, 1, Tolerance::bitwise());
    auto host = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n));
    for (uint8_t& b : *host) b = static_cast<uint8_t>(run.rng().next());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.upload(host->data(), dst.view_rows(first, n)); }, {}};
  };
  return c;
}

OpCase download_case(int64_t rows, int64_t cols, int64_t first, int64_t n) {
  OpCase c;
  c.op = Op::kDownload;
  c.name = strf("rows %lld..%lld of %lldx%lld f32", ll(first), ll(first + n), ll(rows), ll(cols));
  c.uses = {{Op::kDownload}};
  c.work = {0.0, 4.0 * n * cols, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor src = run.input("src", rows, cols, run.rng().uniform(static_cast<size_t>(rows * cols), -1, 1));
    void* host = run.host_output("host", static_cast<size_t>(4 * n * cols));
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.download(src.view_rows(first, n), host); }, {}};
  };
  return c;
}

// ---- Mixture of experts ----

// Logits drawn from a few values, so that rows hold ties; row 0 is all one value.
enum class Renormalize { kNo, kYes };

OpCase route_top_k_case(int64_t n_tokens, int64_t n_expert, int64_t k, Renormalize renorm) {
  const bool renormalize = renorm == Renormalize::kYes;
  OpCase c;
  c.op = Op::kRouteTopK;
  c.name = strf("%lld tokens %lld of %lld experts%s", ll(n_tokens), ll(k), ll(n_expert),
                renormalize ? " renormalized" : "");
  c.uses = {{Op::kRouteTopK}};
  c.work = {5.0 * n_tokens * n_expert * k, 4.0 * n_tokens * (n_expert + 2 * k), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    std::vector<float> logits(static_cast<size_t>(n_tokens * n_expert));
    for (float& v : logits) v = std::round(run.rng().uniform(-8, 8)) * 0.25f;
    for (int64_t e = 0; e < n_expert; ++e) logits[static_cast<size_t>(e)] = 0.5f;
    const Tensor x = run.input("logits", n_tokens, n_expert, logits);
    const Tensor ids = run.output("ids", DType::kI32, n_tokens, k, Tolerance::bitwise());
    const Tensor w = run.output("weights", DType::kF32, n_tokens, k, kTranscendental);
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.route_top_k(x, k, renormalize, ids, w); }, {}};
  };
  return c;
}

OpCase moe_dispatch_case(int64_t n_tokens, int64_t k, int64_t n_expert, int64_t n_used) {
  OpCase c;
  c.op = Op::kMoeDispatch;
  c.name = strf("%lld tokens x %lld to %lld experts (%lld used)", ll(n_tokens), ll(k), ll(n_expert), ll(n_used));
  c.uses = {{Op::kMoeDispatch}};
  c.work = {0.0, 4.0 * (2.0 * n_tokens * k + n_expert + 1), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor ids = run.input("ids", n_tokens, k, random_routes(run.rng(), n_tokens, k, n_used));
    const Tensor order = run.output("order", DType::kI32, 1, n_tokens * k, Tolerance::bitwise());
    const Tensor offsets = run.output("offsets", DType::kI32, 1, n_expert + 1, Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.moe_dispatch(ids, n_expert, order, offsets); }, {}};
  };
  return c;
}

OpCase moe_gather_case(int64_t n_tokens, int64_t k, int64_t n_expert, int64_t d) {
  OpCase c;
  c.op = Op::kMoeGather;
  c.name = strf("%lld tokens x %lld of %lld experts, %lld wide", ll(n_tokens), ll(k), ll(n_expert), ll(d));
  c.uses = {{Op::kMoeGather}};
  c.work = {0.0, 8.0 * n_tokens * k * d, Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const std::vector<int32_t> ids = random_routes(run.rng(), n_tokens, k, n_expert);
    const Tensor order = run.input("order", 1, n_tokens * k, dispatch_order(ids));
    const Tensor x = run.input("x", n_tokens, d, run.rng().uniform(static_cast<size_t>(n_tokens * d), -1, 1));
    const Tensor xs = run.output("xs", DType::kF32, n_tokens * k, d, Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.moe_gather(x, order, k, xs); }, {}};
  };
  return c;
}

OpCase moe_combine_case(int64_t n_tokens, int64_t k, int64_t n_expert, int64_t d) {
  OpCase c;
  c.op = Op::kMoeCombine;
  c.name = strf("%lld tokens x %lld of %lld experts, %lld wide", ll(n_tokens), ll(k), ll(n_expert), ll(d));
  c.uses = {{Op::kMoeCombine}};
  c.work = {2.0 * n_tokens * k * d, 4.0 * (n_tokens * k * d + n_tokens * d), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const std::vector<int32_t> ids = random_routes(run.rng(), n_tokens, k, n_expert);
    const Tensor order = run.input("order", 1, n_tokens * k, dispatch_order(ids));
    const Tensor w = run.input("weights", n_tokens, k, run.rng().uniform(static_cast<size_t>(n_tokens * k), 0, 1));
    const Tensor ys = run.input("ys", n_tokens * k, d, run.rng().uniform(static_cast<size_t>(n_tokens * k * d), -1, 1));
    const Tensor out = run.output("out", DType::kF32, n_tokens, d, kWeightedSum);
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.moe_combine(ys, order, w, out); }, {}};
  };
  return c;
}

// The decoder's expert FFN in order (route, dispatch, gather, gate/up, activation, down,
// combine): the ops must agree on each other's device outputs, not only on host-made inputs.
OpCase moe_chain_case(DType type, int64_t n_tokens, int64_t n_expert, int64_t k, int64_t d, int64_t n_ff) {
  OpCase c;
  c.op = Op::kMoeCombine;
  c.name = strf("chain %s %lld tokens %lld of %lld experts %lld->%lld", dtype_name(type).data(), ll(n_tokens), ll(k),
                ll(n_expert), ll(d), ll(n_ff));
  c.uses = {{Op::kRouteTopK},      {Op::kMoeDispatch},   {Op::kMoeGather},
            {Op::kGroupedMatmul, type}, {Op::kGatedActivation, DType::kF32, static_cast<int>(Activation::kSilu)},
            {Op::kMoeCombine}};
  c.work = {6.0 * n_tokens * k * d * n_ff, 0.0, Bound::kCompute};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const int64_t rows = n_tokens * k;
    std::vector<float> logits = run.rng().uniform(static_cast<size_t>(n_tokens * n_expert), -2, 2);
    logits[1] = logits[2];  // a tie in token 0
    const Tensor router = run.input("router", n_tokens, n_expert, logits);
    const Tensor h = run.input("h", n_tokens, d, run.rng().uniform(static_cast<size_t>(n_tokens * d), -1, 1));
    std::vector<Matrix> gate_w, up_w, down_w;
    for (int64_t e = 0; e < n_expert; ++e) {
      gate_w.push_back(run.matrix(strf("gate.%lld", ll(e)), type, n_ff, d));
      up_w.push_back(run.matrix(strf("up.%lld", ll(e)), type, n_ff, d));
      down_w.push_back(run.matrix(strf("down.%lld", ll(e)), type, d, n_ff));
    }
    const Tolerance all = kProduct;
    const Tensor ids = run.output("ids", DType::kI32, n_tokens, k, Tolerance::bitwise());
    const Tensor weights = run.output("weights", DType::kF32, n_tokens, k, kTranscendental);
    const Tensor order = run.output("order", DType::kI32, 1, rows, Tolerance::bitwise());
    const Tensor offsets = run.output("offsets", DType::kI32, 1, n_expert + 1, Tolerance::bitwise());
    const Tensor xs = run.output("xs", DType::kF32, rows, d, Tolerance::bitwise());
    const Tensor gate = run.output("gate", DType::kF32, rows, n_ff, all);
    const Tensor up = run.output("up", DType::kF32, rows, n_ff, all);
    const Tensor ys = run.output("ys", DType::kF32, rows, d, all);
    const Tensor out = run.output("out", DType::kF32, n_tokens, d, all);
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) {
                     q.route_top_k(router, k, /*renormalize=*/true, ids, weights);
                     q.moe_dispatch(ids, n_expert, order, offsets);
                     q.moe_gather(h, order, k, xs);
                     const GroupedTarget gate_up[] = {{gate_w, gate}, {up_w, up}};
                     q.grouped_matmul(gate_up, offsets, xs);
                     q.gated_activation(Activation::kSilu, gate, up);
                     const GroupedTarget down[] = {{down_w, ys}};
                     q.grouped_matmul(down, offsets, gate);
                     q.moe_combine(ys, order, weights, out);
                   },
                   {}};
  };
  return c;
}

// ---- KV cache and attention ----

// One sequence of an attention case: queries at positions first_query .. first_query +
// n_query - 1, KV for every position up to the last of them; no KV below min_position.
struct AttnSeq {
  int64_t n_query;
  int64_t first_query;
  int64_t min_position = 0;
};

struct AttnShape {
  int64_t n_head, n_head_kv, head_dim;
  int64_t window = 0;
  DType kv_dtype = DType::kF16;
  int64_t block_size = 16;
  int n_groups = 1;         // 2: a full group first, the attended one second (its second layer)
  int64_t n_layers = 2;     // layers of the attended group (perf: many, so KV comes from memory)
};

// Rows the sequence's queries may not see are written with large values: a kernel that reads
// them (a window or min_position not honoured, a stale table entry) moves the output far.
constexpr float kPoison = 240.0f;

struct KvPlan {
  std::vector<KvGroupSpec> groups;
  int group = 0;                       // the attended group and layer
  int32_t layer = 0;
  std::vector<std::vector<int32_t>> tables;  // per sequence, the attended group's full table
  std::vector<int64_t> visible_from;   // per sequence, the first position any query sees
};

KvPlan plan_kv(const AttnShape& s, const std::vector<AttnSeq>& seqs, Rng& rng) {
  KvPlan p;
  KvGroupSpec g;
  g.name = "attended";
  g.kind = s.window > 0 ? KvGroupKind::kSlidingWindow : KvGroupKind::kFull;
  g.n_head_kv = s.n_head_kv;
  g.head_dim = s.head_dim;
  g.window = s.window;
  g.dtype = s.kv_dtype;
  g.block_size = s.block_size;
  int64_t n_blocks = 3;  // spares no sequence uses
  for (const AttnSeq& q : seqs) n_blocks += (q.first_query + q.n_query + s.block_size - 1) / s.block_size;
  g.n_blocks = n_blocks;
  std::vector<int32_t> pool = iota(n_blocks);
  rng.shuffle(pool);  // scattered, as the engine's allocator leaves them
  size_t next = 0;
  for (const AttnSeq& q : seqs) {
    std::vector<int32_t>& t = p.tables.emplace_back();
    for (int64_t b = 0; b * s.block_size < q.first_query + q.n_query; ++b) t.push_back(pool[next++]);
    const int64_t window_first = s.window > 0 ? q.first_query - s.window + 1 : 0;
    p.visible_from.push_back(std::max<int64_t>({0, window_first, q.min_position}));
  }
  if (s.n_groups == 2) {
    // A full group first (other block size, layers 0 and 2), the attended one second (1 and 3).
    KvGroupSpec full = g;
    full.name = "full";
    full.kind = KvGroupKind::kFull;
    full.window = 0;
    full.block_size = 16;
    full.n_blocks = 4;
    full.layers = {0, 2};
    g.layers = {1, 3};
    p.groups = {full, g};
    p.group = 1;
    p.layer = 3;
  } else {
    for (int32_t l = 0; l < s.n_layers; ++l) g.layers.push_back(l);
    p.groups = {g};
    p.layer = static_cast<int32_t>(s.n_layers - 1);
  }
  return p;
}

// The step's sequences: each with its table in the attended group (entries wholly below what
// its queries see are -1, as the engine leaves released sliding blocks) and an empty one in the
// other group.
enum class Step { kFill, kQuery };

std::vector<SequenceSpec> step_sequences(const AttnShape& s, const KvPlan& p, const std::vector<AttnSeq>& seqs,
                                         Step step) {
  const bool fill = step == Step::kFill;
  std::vector<SequenceSpec> out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    SequenceSpec q;
    q.n_tokens = fill ? seqs[i].first_query + seqs[i].n_query : seqs[i].n_query;
    q.first_position = fill ? 0 : seqs[i].first_query;
    q.block_tables.resize(p.groups.size());
    std::vector<int32_t> t = p.tables[i];
    if (!fill) {
      for (size_t b = 0; b < t.size(); ++b) {
        if (static_cast<int64_t>(b + 1) * s.block_size <= p.visible_from[i]) t[b] = -1;
      }
      q.min_position.assign(p.groups.size(), 0);
      q.min_position[static_cast<size_t>(p.group)] = seqs[i].min_position;
    }
    q.block_tables[static_cast<size_t>(p.group)] = std::move(t);
    out.push_back(std::move(q));
  }
  return out;
}

std::string attention_name(const AttnShape& s, const std::vector<AttnSeq>& seqs) {
  // "3@50,1@20 min 7": queries at first position per sequence; runs of equal ones as "64x1@319".
  std::string at;
  for (size_t i = 0; i < seqs.size();) {
    const AttnSeq& q = seqs[i];
    size_t run = 1;
    while (i + run < seqs.size() && seqs[i + run].n_query == q.n_query && seqs[i + run].first_query == q.first_query &&
           seqs[i + run].min_position == q.min_position) {
      ++run;
    }
    at += at.empty() ? "" : ",";
    if (run > 1) at += strf("%zux", run);
    at += strf("%lld@%lld", ll(q.n_query), ll(q.first_query));
    if (q.min_position > 0) at += strf(" min %lld", ll(q.min_position));
    i += run;
  }
  return strf("%lld/%lld heads x %lld %s block %lld%s%s q %s", ll(s.n_head), ll(s.n_head_kv), ll(s.head_dim),
              dtype_name(s.kv_dtype).data(), ll(s.block_size),
              s.window > 0 ? strf(" window %lld", ll(s.window)).c_str() : "", s.n_groups == 2 ? " 2 groups" : "",
              at.c_str());
}

// Every position of every sequence, as one step from position 0, into each layer of the attended
// group through store_kv (so each backend writes its own layout), the rows no query may see
// poisoned.
Status fill_kv(CaseRun& run, KvCache& kv, const AttnShape& s, const KvPlan& p, const std::vector<AttnSeq>& seqs) {
  BatchSpec fill;
  fill.sequences = step_sequences(s, p, seqs, Step::kFill);
  int64_t n = 0;
  for (const SequenceSpec& q : fill.sequences) n += q.n_tokens;
  const int64_t cols = s.n_head_kv * s.head_dim;
  std::vector<Tensor> ks, vs;
  const std::vector<int32_t>& layers = p.groups[static_cast<size_t>(p.group)].layers;
  // Each layer its own rows (a read of the wrong layer shows), but perf's many layers share
  // one pair of inputs.
  const size_t n_inputs = layers.size() <= 4 ? layers.size() : 1;
  for (size_t l = 0; l < n_inputs; ++l) {
    const int32_t layer = layers[l];
    std::vector<float> k = run.rng().uniform(static_cast<size_t>(n * cols), -1, 1);
    std::vector<float> v = run.rng().uniform(static_cast<size_t>(n * cols), -1, 1);
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (int64_t pos = 0; pos < fill.sequences[i].n_tokens; ++pos, ++row) {
        if (pos >= p.visible_from[i]) continue;
        for (int64_t j = 0; j < cols; ++j) {
          const float sign = (run.rng().next() & 1) ? 1.0f : -1.0f;
          k[static_cast<size_t>(row * cols + j)] = sign * kPoison;
          v[static_cast<size_t>(row * cols + j)] = kPoison;
        }
      }
    }
    ks.push_back(run.input(strf("k%d", layer), n, cols, k));
    vs.push_back(run.input(strf("v%d", layer), n, cols, v));
  }
  DI_RETURN_IF_ERROR(run.status());
  DI_RETURN_IF_ERROR(run.set_batch(std::move(fill)));
  for (size_t l = 0; l < layers.size(); ++l) {
    run.queue().store_kv(kv, p.group, layers[l], ks[l % ks.size()], vs[l % vs.size()]);
  }
  return run.queue().sync();
}

OpCase attention_case(AttnShape s, std::vector<AttnSeq> seqs, float scale = 0.0f) {
  OpCase c;
  c.op = Op::kAttention;
  c.name = attention_name(s, seqs);
  c.uses = {{Op::kAttention, s.kv_dtype}, {Op::kStoreKv, s.kv_dtype}};
  double keys = 0.0;
  int64_t n_q = 0;
  for (const AttnSeq& q : seqs) {
    n_q += q.n_query;
    for (int64_t t = q.first_query; t < q.first_query + q.n_query; ++t) {
      const int64_t first = std::max<int64_t>({0, s.window > 0 ? t - s.window + 1 : 0, q.min_position});
      keys += static_cast<double>(t - first + 1);
    }
  }
  // Bytes: the KV rows the step reads once (decode: each query's own), flops: q.k and p.v.
  double kv_rows = 0.0;
  for (const AttnSeq& q : seqs) {
    const int64_t first = std::max<int64_t>({0, s.window > 0 ? q.first_query - s.window + 1 : 0, q.min_position});
    kv_rows += static_cast<double>(q.first_query + q.n_query - first);
  }
  c.work = {4.0 * keys * s.n_head * s.head_dim,
            kv_rows * 2.0 * s.n_head_kv * s.head_dim * static_cast<double>(dtype_row_bytes(s.kv_dtype, 1)),
            n_q == static_cast<int64_t>(seqs.size()) ? Bound::kMemory : Bound::kCompute};
  c.min_reps = s.n_layers > 2 ? static_cast<int>(s.n_layers) : 1;
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const KvPlan p = plan_kv(s, seqs, run.rng());
    KvCache* kv = run.kv_cache(p.groups, CaseRun::KvCheck::kNone);
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(fill_kv(run, *kv, s, p, seqs));
    const int64_t cols = s.n_head * s.head_dim;
    const Tensor q = run.input("q", n_q, cols, run.rng().uniform(static_cast<size_t>(n_q * cols), -1, 1));
    const Tensor out = run.output("out", DType::kF32, n_q, cols, kAttention);
    // Batch invariance: the last query of the first sequence alone gives its bits in the batch.
    const Tensor alone = run.output("out alone", DType::kF32, 1, cols, kAttention);
    DI_RETURN_IF_ERROR(run.status());
    BatchSpec step;
    step.sequences = step_sequences(s, p, seqs, Step::kQuery);
    BatchSpec one;
    one.sequences = {step.sequences[0]};
    one.sequences[0].first_position += one.sequences[0].n_tokens - 1;
    one.sequences[0].n_tokens = 1;
    const int64_t row = seqs[0].n_query - 1;
    DI_RETURN_IF_ERROR(run.set_batch(std::move(step)));
    const float sc = scale > 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const AttentionParams params{s.n_head, s.n_head_kv, s.head_dim, sc, s.window};
    // Perf mode cycles through the group's layers, so that the keys come from memory as in a
    // forward pass (check mode runs the op once: the last layer).
    auto calls = std::make_shared<int64_t>(0);
    const std::vector<int32_t> layers = p.groups[static_cast<size_t>(p.group)].layers;
    CaseOps ops;
    ops.op = [=](Queue& queue) {
      const int32_t layer = layers[static_cast<size_t>((*calls)++ + static_cast<int64_t>(layers.size()) - 1) %
                                   layers.size()];
      queue.attention(params, q, *kv, p.group, layer, out);
    };
    run.same_bits("out", row, "out alone", 0, 1);
    CaseRun* r = &run;
    ops.after = [=](Queue& queue) {
      const Status st = r->set_batch(one);
      DI_ICHECK(st.ok());
      queue.attention(params, q.view_rows(row, 1), *kv, p.group, p.layer, alone);
    };
    return ops;
  };
  return c;
}

// store_kv into a pool of scattered blocks: a first step writes every row, a second rewrites
// them with other values except below each sequence's first_write (shared prefix rows stay).
// Every block, the untouched ones too, is compared byte for byte.
OpCase store_kv_case(DType dtype, int64_t n_head_kv, int64_t head_dim, int64_t block_size, std::vector<TokenSpan> spans,
                     std::vector<int64_t> first_write) {
  OpCase c;
  c.op = Op::kStoreKv;
  int64_t n = 0, n_blocks = 2;
  std::string at;
  for (size_t i = 0; i < spans.size(); ++i) {
    n += spans[i].n_tokens;
    n_blocks += (spans[i].first_position + spans[i].n_tokens + block_size - 1) / block_size;
    at += strf("%s%lld@%lld", at.empty() ? "" : ",", ll(spans[i].n_tokens), ll(spans[i].first_position));
    if (first_write[i] > spans[i].first_position) at += strf(" from %lld", ll(first_write[i]));
  }
  c.name = strf("%s %lldx%lld block %lld tokens %s", dtype_name(dtype).data(), ll(n_head_kv), ll(head_dim),
                ll(block_size), at.c_str());
  c.uses = {{Op::kStoreKv, dtype}};
  const double row_elems = static_cast<double>(n_head_kv * head_dim);
  c.work = {0.0, 2.0 * n * row_elems * (4.0 + static_cast<double>(dtype_row_bytes(dtype, 1))), Bound::kMemory};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    KvGroupSpec g;
    g.name = "kv";
    g.layers = {0, 1};
    g.n_head_kv = n_head_kv;
    g.head_dim = head_dim;
    g.dtype = dtype;
    g.block_size = block_size;
    g.n_blocks = n_blocks;
    KvCache* kv = run.kv_cache({g}, CaseRun::KvCheck::kCompareBlocks);
    std::vector<int32_t> pool = iota(n_blocks);
    run.rng().shuffle(pool);
    BatchSpec first, second;
    size_t next = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      std::vector<int32_t> table;
      for (int64_t b = 0; b * block_size < spans[i].first_position + spans[i].n_tokens; ++b) {
        table.push_back(pool[next++]);
      }
      first.sequences.push_back({spans[i].n_tokens, spans[i].first_position, {table}, {}, {}});
      second.sequences.push_back({spans[i].n_tokens, spans[i].first_position, {table}, {}, {first_write[i]}});
    }
    const int64_t cols = n_head_kv * head_dim;
    const auto elems = static_cast<size_t>(n * cols);
    const Tensor k0 = run.input("k0", n, cols, run.rng().uniform(elems, -2, 2));
    const Tensor v0 = run.input("v0", n, cols, run.rng().uniform(elems, -2, 2));
    const Tensor k1 = run.input("k1", n, cols, run.rng().uniform(elems, -2, 2));
    const Tensor v1 = run.input("v1", n, cols, run.rng().uniform(elems, -2, 2));
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(run.set_batch(std::move(first)));
    run.queue().store_kv(*kv, 0, 1, k0, v0);
    DI_RETURN_IF_ERROR(run.set_batch(std::move(second)));
    return CaseOps{[=](Queue& q) { q.store_kv(*kv, 0, 1, k1, v1); }, {}};
  };
  return c;
}

// ---- The tables ----

// Inner sizes per format: a few blocks, odd counts, and for the float formats lengths that are
// not multiples of 16.
int64_t inner(DType type, int64_t blocks32, int64_t blocks256, int64_t plain) {
  if (is_float(type)) return plain;
  return block_of(type) == 32 ? 32 * blocks32 : 256 * blocks256;
}

void add_products(std::vector<OpCase>& cases, bool full) {
  for (DType type : kWeightFormats) {
    // n_out 48: three packed groups of 16 rows where the format packs; 37: never packed.
    for (int64_t n_out : {48, 37}) {
      cases.push_back(matmul_case(type, n_out, inner(type, 7, 3, 207), 1, Bias::kNone));
      cases.push_back(matmul_case(type, n_out, inner(type, 3, 1, 19), 5, Bias::kAdded));
      cases.push_back(matmul_case(type, n_out, inner(type, 17, 2, 83), 67, Bias::kNone));
    }
    cases.push_back(embed_case(type, 48, inner(type, 3, 1, 19), {0, 47, 5, 5, 17, 30, 1, 46, 5}));
    cases.push_back(embed_case(type, 37, inner(type, 2, 1, 83), {36, 0, 12, 12}));
    // Past one register tile in both directions: 272 = 4 x 64 + 16 rows, 130 = 2 x 64 + 2 tokens.
    cases.push_back(matmul_case(type, 272, inner(type, 16, 2, 515), 130, Bias::kAdded));
    // Output heads' greedy ids: rows in several 256-row calls and both threads' ranges, unpacked
    // (37 rows), one token, a batch, and more tokens than one pass takes.
    cases.push_back(matmul_argmax_case(type, 1040, inner(type, 3, 1, 40), 5));
    cases.push_back(matmul_argmax_case(type, 37, inner(type, 2, 1, 19), 1));
    if (full) cases.push_back(matmul_argmax_case(type, 528, inner(type, 2, 1, 33), 67));
    if (full) {
      // Every row and token remainder of the tiles, at a few depths.
      int i = 0;
      for (int64_t n_out : {16, 64, 80, 17, 269}) {
        for (int64_t n_tokens : {1, 2, 3, 4, 63, 64, 65, 129}) {
          const int64_t depth[][3] = {{1, 1, 33}, {5, 2, 515}, {128, 16, 4096}};
          const auto& d = depth[i++ % 3];
          cases.push_back(matmul_case(type, n_out, inner(type, d[0], d[1], d[2]), n_tokens,
                                            n_tokens % 2 == 1 ? Bias::kAdded : Bias::kNone));
        }
      }
      cases.push_back(matmul_case(type, 1024, inner(type, 64, 8, 2048), 1, Bias::kNone));
      cases.push_back(matmul_case(type, 8, inner(type, 448, 56, 14336), 2, Bias::kNone));  // Llama's FFN depth
    }
  }
  for (DType type : {DType::kF16, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t n_in = inner(type, 6, 2, 64);
    cases.push_back(matmul_group_case({type, type, type}, {48, 16, 16}, n_in, 5));
    cases.push_back(matmul_group_case({type, type}, {32, 37}, n_in, 3));
    cases.push_back(matmul_group_case({type, type}, {64, 64}, n_in, 1));
  }
  // Formats mixed: packed and unpacked rows in one parallel region (one activation format), and
  // activation formats that differ (one product after the other).
  cases.push_back(matmul_group_case({DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}, {48, 16, 16}, 512, 5));
  cases.push_back(matmul_group_case({DType::kQ4_0, DType::kQ8_0, DType::kQ5_0}, {32, 32, 16}, 96, 67));
  cases.push_back(matmul_group_case({DType::kQ4_0, DType::kQ4_K, DType::kF16}, {16, 32, 16}, 256, 2));
  for (DType type :
       {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kMXFP4}) {
    const int64_t n_in = inner(type, 4, 1, 40);
    cases.push_back(grouped_matmul_case(type, {3, 0, 1, 7, 0, 2}, n_in, {32, 32}));
    cases.push_back(grouped_matmul_case(type, {0, 5, 1, 0}, n_in, {37}));
  }
}

void add_elementwise(std::vector<OpCase>& cases, bool full) {
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 576}, {5, 1000}, {7, 17}, {67, 64}, {3, 1}}) {
    cases.push_back(rms_norm_case(rows, n, 1e-5f, Placement::kOutOfPlace));
  }
  cases.push_back(rms_norm_case(5, 576, 1e-6f, Placement::kInPlace));
  for (RopePairing pairing : {RopePairing::kHalf, RopePairing::kInterleaved}) {
    cases.push_back(rope_case(pairing, 9, 64, 64, 10000.0, {{5, 0}, {3, 8190}}));
    cases.push_back(rope_case(pairing, 3, 128, 32, 1e6, {{1, 77}, {6, 1}}));
    cases.push_back(rope_case(pairing, 2, 80, 80, 500000.0, {{9, 30}}));
  }
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 15}, {1, 17}, {3, 1000}, {1, 4099}}) {
      cases.push_back(gated_case(act, rows, cols));
    }
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 17}, {5, 576}, {1, 4099}}) {
    cases.push_back(add_case(rows, cols));
    cases.push_back(scale_case(rows, cols, rows == 5 ? 33.75f : 0.125f));
  }
  cases.push_back(soft_cap_case(2, 1001, 30.0f));
  cases.push_back(soft_cap_case(1, 17, 50.0f));
  cases.push_back(gather_output_rows_case(12, 576, {4, 0, 4, 11}));
  cases.push_back(gather_output_rows_case(5, 17, {4}));
  cases.push_back(upload_case(64, 3, 13));
  cases.push_back(upload_case(16, 0, 16));
  cases.push_back(download_case(7, 13, 2, 3));
  cases.push_back(download_case(1, 5, 0, 1));
  if (full) {
    cases.push_back(rms_norm_case(64, 4096, 1e-6f, Placement::kOutOfPlace));
    cases.push_back(rope_case(RopePairing::kHalf, 32, 128, 128, 500000.0, {{100, 0}, {1, 130000}}));
    cases.push_back(gated_case(Activation::kSilu, 64, 8193));
    cases.push_back(gated_case(Activation::kGeluTanh, 64, 8193));
  }
}

void add_moe(std::vector<OpCase>& cases, bool full) {
  for (Renormalize renorm : {Renormalize::kNo, Renormalize::kYes}) {
    cases.push_back(route_top_k_case(7, 8, 2, renorm));
    cases.push_back(route_top_k_case(3, 60, 4, renorm));
  }
  cases.push_back(route_top_k_case(5, 128, 8, Renormalize::kYes));
  cases.push_back(route_top_k_case(2, 4, 1, Renormalize::kNo));
  cases.push_back(moe_dispatch_case(13, 2, 8, 6));
  cases.push_back(moe_dispatch_case(1, 4, 16, 16));
  cases.push_back(moe_dispatch_case(64, 8, 128, 100));
  cases.push_back(moe_gather_case(13, 2, 8, 576));
  cases.push_back(moe_gather_case(3, 4, 6, 17));
  cases.push_back(moe_combine_case(13, 2, 8, 576));
  cases.push_back(moe_combine_case(3, 4, 6, 17));
  cases.push_back(moe_chain_case(DType::kQ4_0, 9, 8, 2, 64, 32));
  cases.push_back(moe_chain_case(DType::kQ6_K, 4, 6, 3, 256, 256));
  if (full) cases.push_back(moe_chain_case(DType::kQ4_K, 64, 16, 4, 512, 256));
}

void add_kv(std::vector<OpCase>& cases, bool full) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    cases.push_back(store_kv_case(dtype, 3, 64, 16, {{20, 0}, {1, 39}}, {0, 0}));
    cases.push_back(store_kv_case(dtype, 2, 17, 5, {{9, 3}, {4, 0}, {7, 30}}, {8, 0, 33}));
  }
  cases.push_back(store_kv_case(DType::kF16, 1, 256, 7, {{30, 0}}, {16}));
  cases.push_back(store_kv_case(DType::kF32, 2, 64, 1, {{5, 2}, {1, 0}}, {4, 0}));
  using S = AttnShape;
  for (DType dt : {DType::kF32, DType::kF16}) {
    // Decode: one query per sequence, lengths around block edges, SmolLM2's heads.
    cases.push_back(attention_case(S{9, 3, 64, 0, dt, 16}, {{1, 0}, {1, 16}, {1, 39}, {1, 99}}));
    // A prefill chunk from the start and one mid-context, GQA 4:1, head_dim 128.
    cases.push_back(attention_case(S{4, 1, 128, 0, dt, 16}, {{37, 0}, {5, 60}}));
  }
  // Odd head_dim, block size 5, no GQA, several sequences; Gemma's 256-wide heads with a window.
  cases.push_back(attention_case(S{6, 6, 17, 0, DType::kF16, 5}, {{7, 30}, {1, 11}, {3, 0}}));
  cases.push_back(attention_case(S{4, 1, 256, 37, DType::kF16, 16}, {{3, 50}, {1, 20}}, 0.0625f));
  // Sliding window over block size 7 (released blocks are -1), prefill and decode together.
  cases.push_back(attention_case(S{8, 2, 32, 20, DType::kF16, 7}, {{9, 50}, {1, 90}, {1, 3}}));
  // SWA bounded replay: KV exists from min_position only, with and without a window.
  cases.push_back(attention_case(S{4, 1, 64, 16, DType::kF32, 16}, {{21, 40, 40}, {1, 70, 47}}));
  cases.push_back(attention_case(S{4, 2, 64, 0, DType::kF16, 16}, {{5, 33, 30}}));
  // Block size 33 and 48 (not dividing the sequences), 2:1 heads of 80.
  cases.push_back(attention_case(S{2, 1, 80, 0, DType::kF32, 33}, {{1, 149}, {12, 60}, {1, 0}}));
  cases.push_back(attention_case(S{8, 2, 32, 0, DType::kF16, 48}, {{2, 97}}));
  // Two KV groups (full, sliding) of two layers: the second group's second layer is attended.
  cases.push_back(attention_case(S{4, 2, 64, 10, DType::kF16, 7, 2}, {{3, 25}, {1, 8}}));
  // One position per block.
  cases.push_back(attention_case(S{2, 1, 64, 0, DType::kF16, 1}, {{3, 9}, {1, 4}}));
  // Query groups wider than 64 heads (multi-query attention): 128 heads on one KV head, and 71
  // (prime, as Falcon's) with enough tokens that the kernel takes whole groups per item.
  cases.push_back(attention_case(S{128, 1, 64, 0, DType::kF16, 16}, {{9, 20}}));
  cases.push_back(attention_case(S{71, 1, 32, 0, DType::kF32, 16}, {{4, 0}, {5, 30}}));
  // A decode batch of many sequences of mixed lengths (the threads' split of work items).
  cases.push_back(attention_case(S{9, 3, 64, 0, DType::kF16, 16}, [] {
    std::vector<AttnSeq> seqs;
    for (int64_t i = 0; i < 16; ++i) seqs.push_back({1, (i * 37) % 301});
    return seqs;
  }()));
  if (full) {
    // Wide heads (DeepSeek's latent KV: 512 + 64) and long rows.
    cases.push_back(attention_case(S{16, 1, 576, 0, DType::kF16, 16}, {{1, 130}, {9, 40}}, 0.04f));
    cases.push_back(attention_case(S{16, 8, 128, 0, DType::kF16, 16}, {{1, 511}, {1, 300}, {64, 200}}));
    cases.push_back(attention_case(S{9, 3, 64, 0, DType::kF16, 16}, {{128, 0}}));
    cases.push_back(attention_case(S{4, 1, 256, 512, DType::kF16, 16}, {{1, 1000}, {40, 600, 100}}));
    // Heads, block sizes and windows crossed, decode and chunks mixed.
    for (auto [n_head, n_head_kv, head_dim] : {std::array<int64_t, 3>{8, 8, 64}, {12, 4, 64}, {16, 2, 128},
                                               {3, 1, 96}, {10, 5, 40}}) {
      for (int64_t block : {1, 3, 16, 32, 64}) {
        for (int64_t window : {0, 50}) {
          for (DType dt : {DType::kF32, DType::kF16}) {
            cases.push_back(attention_case(S{n_head, n_head_kv, head_dim, window, dt, block},
                                           {{1, 200}, {17, 90, window > 0 ? 60 : 0}, {1, 0}, {33, 0}}));
          }
        }
      }
    }
    cases.push_back(store_kv_case(DType::kF16, 8, 128, 1, {{40, 0}, {3, 100}}, {20, 101}));
  }
}

// ---- DeepSeek V4 (one implementation today: the CPU's scalar loops are its own reference;
// these cases hold a future fast path or device to them, and check guards and outputs) ----

OpCase clamp_case(int64_t rows, int64_t cols, float lo, float hi) {
  OpCase c;
  c.op = Op::kClamp;
  c.name = strf("%lldx%lld [%g, %g]", ll(rows), ll(cols), static_cast<double>(lo), static_cast<double>(hi));
  c.uses = {{Op::kClamp}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor x = run.inout("x", rows, cols, with_extremes(run.rng(), rows * cols, 20.0f), Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.clamp(x, lo, hi); }, {}};
  };
  return c;
}

OpCase hyper_case(int64_t n, int64_t s, int64_t d, int64_t iters, bool head) {
  OpCase c;
  c.op = Op::kHyperPre;
  c.name = strf("%s n%lld s%lld d%lld iters%lld", head ? "head" : "site", ll(n), ll(s), ll(d), ll(iters));
  c.uses = {{Op::kHyperPre}, {Op::kHyperPost}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const int64_t n_mix = head ? s : (2 + s) * s;
    const Tensor streams = run.input("streams", n, s * d, run.rng().uniform(static_cast<size_t>(n * s * d), -2, 2));
    const Tensor mixes = run.input("mixes", n, n_mix, run.rng().uniform(static_cast<size_t>(n * n_mix), -2, 2));
    const Tensor base = run.input("base", 1, n_mix, run.rng().uniform(static_cast<size_t>(n_mix), -1, 1));
    const Tensor scale = run.input("scale", 1, head ? 1 : 3, run.rng().uniform(head ? 1 : 3, 0.5f, 1.5f));
    const Tensor x = run.input("x", n, d, run.rng().uniform(static_cast<size_t>(n * d), -2, 2));
    const Tensor collapsed = run.output("collapsed", DType::kF32, n, d, kWeightedSum);
    const Tensor post = head ? Tensor{} : run.output("post", DType::kF32, n, s, kTranscendental);
    const Tensor comb = head ? Tensor{} : run.output("comb", DType::kF32, n, s * s, kTranscendental);
    const Tensor out = head ? Tensor{} : run.output("out streams", DType::kF32, n, s * d, kWeightedSum);
    const Tensor pre = head ? Tensor{} : run.output("pre", DType::kF32, n, s, kTranscendental);
    DI_RETURN_IF_ERROR(run.status());
    const HyperParams p{s, iters, 1e-6f};
    return CaseOps{[=](Queue& q) {
                     q.hyper_pre(p, streams, mixes, base, scale, collapsed, post, comb, pre);
                     if (!head) q.hyper_post(p, streams, x, post, comb, out);
                   },
                   {}};
  };
  return c;
}

OpCase route_sqrt_softplus_case(int64_t n, int64_t n_expert, int64_t k, bool hash) {
  OpCase c;
  c.op = Op::kRouteSqrtSoftplus;
  c.name = strf("n%lld e%lld k%lld%s", ll(n), ll(n_expert), ll(k), hash ? " hash" : "");
  c.uses = {{Op::kRouteSqrtSoftplus}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor logits = run.input("logits", n, n_expert, run.rng().uniform(static_cast<size_t>(n * n_expert), -30, 30));
    const Tensor bias = run.input("bias", 1, n_expert, run.rng().uniform(static_cast<size_t>(n_expert), -0.5f, 0.5f));
    std::vector<int32_t> fixed;
    for (int64_t t = 0; t < n * k; ++t) fixed.push_back(static_cast<int32_t>(run.rng().below(n_expert)));
    const Tensor fixed_ids = hash ? run.input("fixed ids", n, k, fixed) : Tensor{};
    const Tensor ids = run.output("ids", DType::kI32, n, k, Tolerance::bitwise());
    const Tensor w = run.output("weights", DType::kF32, n, k, kTranscendental);
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.route_sqrt_softplus(logits, bias, fixed_ids, k, 1.5f, ids, w); }, {}};
  };
  return c;
}

// A one-head KV group of the DeepSeek V4 / V4.1 cases: 6 blocks of block_size tokens.
KvGroupSpec dsv4_case_group(const char* name, KvGroupKind kind, int64_t width, int64_t tokens_per_row, int64_t window,
                            bool k_only, std::vector<int32_t> layers, DType dtype, int64_t block_size) {
  KvGroupSpec g;
  g.name = name;
  g.kind = kind;
  g.layers = std::move(layers);
  g.n_head_kv = 1;
  g.head_dim = width;
  g.tokens_per_row = tokens_per_row;
  g.window = window;
  g.k_only = k_only;
  g.dtype = dtype;
  g.block_size = block_size;
  g.n_blocks = 6;
  return g;
}

// A CSA layer's KV path on one layer: window and frontier rows stored, both compressors run,
// the indexer's top-k and the attention over window, selected entries and sinks; two sequences,
// scattered blocks, the second decoding one token after 19, or (replay) replaying 8..19 after a
// prefix hit of 16 tokens, as the engine does for DeepSeek V4.
OpCase dsv4_csa_case(DType kv_dtype, bool replay) {
  OpCase c;
  c.op = Op::kSparseAttention;
  c.name = strf("csa chain %s kv%s", std::string(dtype_name(kv_dtype)).c_str(), replay ? ", replay" : "");
  c.uses = {{Op::kStoreKv, kv_dtype}, {Op::kCompressKv, kv_dtype}, {Op::kIndexTopK, kv_dtype},
            {Op::kSparseAttention, kv_dtype}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    constexpr int64_t hd = 32, id = 16, ih = 4, H = 4, rate = 4, window = 8, n_rot = 8, top_k = 2, bs = 16;
    const auto group = [&](const char* name, KvGroupKind kind, int64_t width, int64_t tpr, int64_t win, bool k_only) {
      return dsv4_case_group(name, kind, width, tpr, win, k_only, {0}, kv_dtype, bs);
    };
    std::vector<KvGroupSpec> groups = {
        group("window", KvGroupKind::kSlidingWindow, hd, 1, window, true),
        group("csa_kv", KvGroupKind::kCompressed, hd, rate, 0, true),
        group("csa_index", KvGroupKind::kCompressed, id, rate, 0, true),
        group("csa_state", KvGroupKind::kCompressorState, 2 * hd, 1, 2 * rate, false),
        group("csa_index_state", KvGroupKind::kCompressorState, 2 * id, 1, 2 * rate, false)};
    KvCache* kv = run.kv_cache(groups, CaseRun::KvCheck::kNone);
    DI_RETURN_IF_ERROR(run.status());
    const auto spec = [&](int64_t n, int64_t first, std::vector<int32_t> table) {
      SequenceSpec s{n, first, {}, {}, {}};
      s.block_tables.assign(groups.size(), std::move(table));
      return s;
    };
    BatchSpec step;
    // The second sequence decodes position 19, or (replay) took a prefix hit of 16 tokens and
    // replays from 8: it stores other window and frontier rows for 8..18 than the fill did,
    // reads no window below 8, and must leave the shared compressed rows of 0..15 as they are.
    const int64_t n_b = replay ? 12 : 1, first_b = replay ? 8 : 19;
    SequenceSpec b = spec(n_b, first_b, {1, 5});
    if (replay) {
      b.min_position = {8, 0, 0, 8, 8};
      b.first_write = {0, 16, 16, 0, 0};
    }
    step.sequences = {spec(23, 0, {4, 0}), b};
    const int64_t n = 23 + n_b;
    // The second sequence's first 19 positions, stored first.
    BatchSpec fill;
    fill.sequences = {spec(19, 0, {1, 5})};
    std::vector<float> freq(n_rot / 2);
    for (int64_t i = 0; i < n_rot / 2; ++i) freq[static_cast<size_t>(i)] = std::pow(160000.0f, -2.0f * i / n_rot);
    const Tensor inv_freq = run.input("inv_freq", 1, n_rot / 2, freq);
    const auto rows = [&](const char* name, int64_t r, int64_t cols) {
      return run.input(name, r, cols, run.rng().uniform(static_cast<size_t>(r * cols), -1, 1));
    };
    const Tensor fk = rows("fill kv", 19, hd), fs = rows("fill state k", 19, 2 * hd), fg = rows("fill state v", 19, 2 * hd);
    const Tensor fik = rows("fill index k", 19, 2 * id), fig = rows("fill index v", 19, 2 * id);
    const Tensor k = rows("kv", n, hd), sk = rows("state k", n, 2 * hd), sv = rows("state v", n, 2 * hd);
    const Tensor ik = rows("index k", n, 2 * id), iv = rows("index v", n, 2 * id);
    const Tensor ape = rows("ape", rate, 2 * hd), iape = rows("index ape", rate, 2 * id);
    const Tensor norm = rows("norm", 1, hd), inorm = rows("index norm", 1, id);
    const Tensor q = rows("q", n, H * hd), qi = rows("qi", n, ih * id), w = rows("w", n, ih), sinks = rows("sinks", 1, H);
    const Tensor ids = run.output("ids", DType::kI32, n, top_k, Tolerance::bitwise());
    const Tensor out = run.output("out", DType::kF32, n, H * hd, kAttention);
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(run.set_batch(fill));
    Queue& qq = run.queue();
    const CompressParams cp{rate, hd, true, 1e-6f, n_rot}, icp{rate, id, true, 1e-6f, n_rot};
    qq.store_kv(*kv, 0, 0, fk, fk);
    qq.store_kv(*kv, 3, 0, fs, fg);
    qq.store_kv(*kv, 4, 0, fik, fig);
    qq.compress_kv(cp, *kv, 3, 1, 0, ape, norm, inv_freq);
    qq.compress_kv(icp, *kv, 4, 2, 0, iape, inorm, inv_freq);
    DI_RETURN_IF_ERROR(qq.sync());
    DI_RETURN_IF_ERROR(run.set_batch(step));
    return CaseOps{[=](Queue& qu) {
                     qu.store_kv(*kv, 0, 0, k, k);
                     qu.store_kv(*kv, 3, 0, sk, sv);
                     qu.store_kv(*kv, 4, 0, ik, iv);
                     qu.compress_kv(cp, *kv, 3, 1, 0, ape, norm, inv_freq);
                     qu.compress_kv(icp, *kv, 4, 2, 0, iape, inorm, inv_freq);
                     qu.index_top_k({ih, id, rate, top_k, 0.25f}, qi, w, *kv, 2, 0, ids, Tensor{});
                     qu.sparse_attention({H, hd, 1.0f / std::sqrt(32.0f), window, rate}, q, *kv, 0, 1, 0, sinks, ids,
                                         out);
                   },
                   {}};
  };
  return c;
}

OpCase cache_round_trip_case(int64_t rows, int64_t cols, CacheFormat format, int64_t block) {
  static constexpr const char* kNames[] = {"fp8 e4m3", "mxfp4", "nvfp4"};
  OpCase c;
  c.op = Op::kCacheRoundTrip;
  c.name = strf("%lldx%lld %s /%lld", ll(rows), ll(cols), kNames[static_cast<int>(format)], ll(block));
  c.uses = {{Op::kCacheRoundTrip}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    // Magnitudes over many binades, so that blocks take large, small and subnormal scales.
    std::vector<float> v = with_extremes(run.rng(), rows * cols, 4.0f);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>((i / block) % 40) - 24);
    const Tensor x = run.inout("x", rows, cols, v, Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.cache_round_trip(x, format, block); }, {}};
  };
  return c;
}

// A V4.1 CSA2 chain over two layers: layer 0 owns a ratio-2 compressor (pending tokens in the
// state group, entries as rows by compress_rows, stored by their closing tokens), selects its
// entries and candidate blocks; layer 1 restricts its selection to those blocks and attends
// over layer 0's rows. Two sequences, one decoding after a prefill step.
OpCase dsv41_csa2_case(DType kv_dtype) {
  OpCase c;
  c.op = Op::kCompressRows;
  c.name = strf("csa2 chain kv%s", std::string(dtype_name(kv_dtype)).c_str());
  c.uses = {{Op::kStoreKv, kv_dtype}, {Op::kCompressRows, kv_dtype}, {Op::kIndexTopK, kv_dtype},
            {Op::kSparseAttention, kv_dtype}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    constexpr int64_t hd = 32, id = 16, ih = 4, H = 2, rate = 2, window = 6, n_rot = 8, top_k = 3, bs = 16;
    constexpr int64_t cblock = 2, ctop = 2;
    const auto group = [&](const char* name, KvGroupKind kind, int64_t width, int64_t tpr, int64_t win, bool k_only,
                           std::vector<int32_t> layers) {
      return dsv4_case_group(name, kind, width, tpr, win, k_only, std::move(layers), kv_dtype, bs);
    };
    std::vector<KvGroupSpec> groups = {
        group("window", KvGroupKind::kSlidingWindow, hd, 1, window, true, {0, 1}),
        group("csa2_kv", KvGroupKind::kCompressed, hd, rate, 0, true, {0}),
        group("csa2_index", KvGroupKind::kCompressed, id, rate, 0, true, {0}),
        group("csa2_state", KvGroupKind::kCompressorState, hd, 1, rate, false, {0})};
    KvCache* kv = run.kv_cache(groups, CaseRun::KvCheck::kNone);
    DI_RETURN_IF_ERROR(run.status());
    const auto spec = [&](int64_t n, int64_t first, std::vector<int32_t> table) {
      SequenceSpec s{n, first, {}, {}, {}};
      s.block_tables.assign(groups.size(), std::move(table));
      return s;
    };
    BatchSpec fill, step;
    fill.sequences = {spec(21, 0, {1, 5})};
    step.sequences = {spec(26, 0, {4, 0}), spec(1, 21, {1, 5})};
    const int64_t n = 27;
    const auto rows = [&](const char* name, int64_t r, int64_t cols) {
      return run.input(name, r, cols, run.rng().uniform(static_cast<size_t>(r * cols), -1, 1));
    };
    const Tensor fk = rows("fill kv", 21, hd), fs = rows("fill state k", 21, hd), fg = rows("fill state v", 21, hd);
    const Tensor fik = rows("fill index k", 21, id);
    const Tensor k = rows("kv", n, hd), sk = rows("state k", n, hd), sv = rows("state v", n, hd);
    const Tensor ik = rows("index k", n, id);
    const Tensor ape = run.input("ape", rate, hd, std::vector<float>(static_cast<size_t>(rate * hd), 0.0f));
    const Tensor norm = rows("norm", 1, hd);
    const Tensor q = rows("q", n, H * hd), qi = rows("qi", n, ih * id), w = rows("w", n, ih), sinks = rows("sinks", 1, H);
    const Tensor latent = run.output("latent", DType::kF32, n, hd, kWeightedSum);
    const Tensor ids0 = run.output("ids layer 0", DType::kI32, n, top_k, Tolerance::bitwise());
    const Tensor cand = run.output("candidates", DType::kI32, n, ctop, Tolerance::bitwise());
    const Tensor ids1 = run.output("ids layer 1", DType::kI32, n, top_k, Tolerance::bitwise());
    const Tensor out = run.output("out", DType::kF32, n, H * hd, kAttention);
    DI_RETURN_IF_ERROR(run.status());
    const CompressParams cp{rate, hd, false, 1e-6f, n_rot};
    // The owner's compressed rows and index keys: the batch's latents, as the model derives them.
    const auto owner_rows = [=](Queue& qq, const Tensor& state_k, const Tensor& state_v, const Tensor& index_k,
                                const Tensor& lat) {
      qq.store_kv(*kv, 3, 0, state_k, state_v);
      qq.compress_rows(cp, *kv, 3, 1, 0, ape, norm, lat);
      qq.store_kv(*kv, 1, 0, lat, lat);
      qq.store_kv(*kv, 2, 0, index_k, index_k);
    };
    const Tensor fill_latent = run.output("fill latent", DType::kF32, 21, hd, kWeightedSum);
    DI_RETURN_IF_ERROR(run.set_batch(fill));
    Queue& qf = run.queue();
    qf.store_kv(*kv, 0, 0, fk, fk);
    qf.store_kv(*kv, 0, 1, fk, fk);
    owner_rows(qf, fs, fg, fik, fill_latent);
    DI_RETURN_IF_ERROR(qf.sync());
    DI_RETURN_IF_ERROR(run.set_batch(step));
    const IndexParams select{ih, id, rate, top_k, 1.0f, CandidateUse::kSelect, cblock, ctop};
    const IndexParams restrict{ih, id, rate, top_k, 1.0f, CandidateUse::kRestrict, cblock, ctop};
    return CaseOps{[=](Queue& qu) {
                     qu.store_kv(*kv, 0, 0, k, k);
                     qu.store_kv(*kv, 0, 1, k, k);
                     owner_rows(qu, sk, sv, ik, latent);
                     qu.index_top_k(select, qi, w, *kv, 2, 0, ids0, cand);
                     qu.index_top_k(restrict, qi, w, *kv, 2, 0, ids1, cand);
                     qu.sparse_attention({H, hd, 1.0f / std::sqrt(32.0f), window, rate, 0}, q, *kv, 0, 1, 1, sinks,
                                         ids1, out);
                   },
                   {}};
  };
  return c;
}

OpCase gather_rows_case(DType type, int64_t n_rows, int64_t cols, int64_t n, int64_t k) {
  OpCase c;
  c.op = Op::kGatherRows;
  c.name = strf("%s %lldx%lld n%lld k%lld", dtype_name(type).data(), ll(n_rows), ll(cols), ll(n), ll(k));
  c.uses = {{Op::kGatherRows, type}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Matrix table = run.matrix("table", type, n_rows, cols);
    std::vector<int32_t> picks;
    for (int64_t i = 0; i < n * k; ++i) picks.push_back(static_cast<int32_t>(run.rng().below(n_rows)));
    picks.back() = static_cast<int32_t>(n_rows - 1);
    const Tensor ids = run.input("ids", n, k, picks);
    const Tensor out = run.output("out", DType::kF32, n, k * cols, Tolerance::bitwise());
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.gather_rows(table, ids, out); }, {}};
  };
  return c;
}

OpCase engram_mix_case(int64_t n, int64_t s, int64_t d) {
  OpCase c;
  c.op = Op::kEngramMix;
  c.name = strf("n%lld s%lld d%lld", ll(n), ll(s), ll(d));
  c.uses = {{Op::kEngramMix}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    const Tensor streams = run.inout("streams", n, s * d, run.rng().uniform(static_cast<size_t>(n * s * d), -2, 2),
                                     kWeightedSum);
    const Tensor kv = run.input("kv", n, (s + 1) * d, run.rng().uniform(static_cast<size_t>(n * (s + 1) * d), -2, 2));
    const Tensor w = run.input("weight", 1, s * d, run.rng().uniform(static_cast<size_t>(s * d), 0.5f, 1.5f));
    DI_RETURN_IF_ERROR(run.status());
    return CaseOps{[=](Queue& q) { q.engram_mix(streams, kv, w, 1e-6f); }, {}};
  };
  return c;
}

// DSpark's draft blocks: a window group filled by a first step, then blocks of `block` rows at
// anchors of two sequences (one near its start, the window cut short), over scattered blocks.
OpCase block_attention_case(DType kv_dtype) {
  OpCase c;
  c.op = Op::kBlockAttention;
  c.name = strf("dspark blocks kv%s", std::string(dtype_name(kv_dtype)).c_str());
  // The fill's store_kv is set-up (K = V rows: a K/V mix-up cannot show here).
  c.uses = {{Op::kBlockAttention, kv_dtype}};
  c.build = [=](CaseRun& run) -> Result<CaseOps> {
    constexpr int64_t hd = 32, H = 3, window = 8, block = 5, bs = 16;
    KvCache* kv = run.kv_cache(
        {dsv4_case_group("dspark_window", KvGroupKind::kSlidingWindow, hd, 1, window, true, {0, 1}, kv_dtype, bs)},
        CaseRun::KvCheck::kNone);
    DI_RETURN_IF_ERROR(run.status());
    const auto spec = [](int64_t n, int64_t first, std::vector<int32_t> table) {
      SequenceSpec s{n, first, {}, {}, {}};
      s.block_tables.assign(1, std::move(table));
      return s;
    };
    BatchSpec fill, step;
    fill.sequences = {spec(30, 0, {4, 0}), spec(3, 0, {1, 5})};
    step.sequences = {spec(block, 30, {4, 0}), spec(block, 3, {1, 5})};
    const auto rows = [&](const char* name, int64_t r, int64_t cols) {
      return run.input(name, r, cols, run.rng().uniform(static_cast<size_t>(r * cols), -1, 1));
    };
    const Tensor fk = rows("context", 33, hd), bk = rows("block kv", 2 * block, hd), q = rows("q", 2 * block, H * hd);
    const Tensor sinks = rows("sinks", 1, H);
    const Tensor out = run.output("out", DType::kF32, 2 * block, H * hd, kAttention);
    DI_RETURN_IF_ERROR(run.status());
    DI_RETURN_IF_ERROR(run.set_batch(fill));
    run.queue().store_kv(*kv, 0, 1, fk, fk);
    DI_RETURN_IF_ERROR(run.queue().sync());
    DI_RETURN_IF_ERROR(run.set_batch(step));
    return CaseOps{[=](Queue& qu) {
                     qu.block_attention({H, hd, 1.0f / std::sqrt(32.0f), window, block}, q, *kv, 0, 1, bk, sinks, out);
                   },
                   {}};
  };
  return c;
}

void add_dsv4(std::vector<OpCase>& cases) {
  cases.push_back(block_attention_case(DType::kF32));
  cases.push_back(block_attention_case(DType::kF16));
  cases.push_back(gather_rows_case(DType::kF32, 97, 16, 5, 6));
  cases.push_back(gather_rows_case(DType::kBF16, 1000, 32, 3, 24));
  cases.push_back(engram_mix_case(5, 4, 48));
  for (CacheFormat f : {CacheFormat::kFp8E4M3, CacheFormat::kMxfp4, CacheFormat::kNvfp4}) {
    cases.push_back(cache_round_trip_case(5, 64, f, f == CacheFormat::kNvfp4 ? 16 : 32));
  }
  cases.push_back(dsv41_csa2_case(DType::kF32));
  cases.push_back(dsv41_csa2_case(DType::kF16));
  cases.push_back(clamp_case(5, 33, -10.0f, 10.0f));
  cases.push_back(clamp_case(3, 8, -INFINITY, 10.0f));
  cases.push_back(hyper_case(5, 4, 24, 20, false));
  cases.push_back(hyper_case(3, 2, 17, 3, false));
  cases.push_back(hyper_case(4, 4, 24, 0, true));
  cases.push_back(route_sqrt_softplus_case(7, 16, 6, false));
  cases.push_back(route_sqrt_softplus_case(5, 8, 2, true));
  cases.push_back(dsv4_csa_case(DType::kF32, false));
  cases.push_back(dsv4_csa_case(DType::kF16, false));
  cases.push_back(dsv4_csa_case(DType::kF32, true));
}

std::vector<OpCase> check_cases(CaseSet set) {
  const bool full = set == CaseSet::kFull;
  std::vector<OpCase> cases;
  add_products(cases, full);
  add_elementwise(cases, full);
  add_moe(cases, full);
  add_kv(cases, full);
  add_dsv4(cases);
  return cases;
}

// Perf-sized cases: the shapes `deepinfer bench ops` reports.
std::vector<OpCase> perf_cases() {
  std::vector<OpCase> cases;
  // Decode: one token through 8192 x 4096 (tens of MB, past the caches): GB/s of weights.
  for (DType type : kWeightFormats) cases.push_back(matmul_case(type, 8192, 4096, 1, Bias::kNone));
  // Prefill: 256 tokens through 2048 x 2048: GFLOP/s.
  for (DType type : kWeightFormats) cases.push_back(matmul_case(type, 2048, 2048, 256, Bias::kNone));
  cases.push_back(matmul_group_case({DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}, {2048, 512, 512}, 2048, 256));
  // Batched decode through Gemma 3's output head (262144 x 640, 170 MB of Q8_0: past the L2,
  // streamed from memory every step), 16 and 64 sequences: bound by memory and compute at once.
  for (int64_t n_tokens : {16, 64}) cases.push_back(matmul_case(DType::kQ8_0, 262144, 640, n_tokens, Bias::kNone));
  // The same head's greedy ids alone (the logits never written out); also by 14 tokens, a served
  // step's batch at 16 in flight (6 + 4 + 4 tokens a row of tiles).
  for (int64_t n_tokens : {14, 16, 64}) cases.push_back(matmul_argmax_case(DType::kQ8_0, 262144, 640, n_tokens));
  // One layer of Gemma 3 270M's batched decode at 48 tokens (64 in flight, some prefilling):
  // small matrices whose weights stay in the L2 between the tiles, so compute-bound.
  cases.push_back(matmul_group_case({DType::kQ5_0, DType::kQ5_0, DType::kQ8_0}, {1024, 256, 256}, 640, 48));
  cases.push_back(matmul_case(DType::kQ4_K, 640, 1024, 48, Bias::kNone));
  cases.push_back(matmul_group_case({DType::kQ5_0, DType::kQ5_0}, {2048, 2048}, 640, 48));
  cases.push_back(matmul_case(DType::kQ6_K, 640, 2048, 48, Bias::kNone));
  cases.push_back(matmul_case(DType::kQ4_K, 640, 2048, 48, Bias::kNone));
  cases.push_back(
      attention_case(AttnShape{4, 1, 256, 0, DType::kF16, 16, 1, 18}, std::vector<AttnSeq>(48, AttnSeq{1, 191})));
  cases.push_back(grouped_matmul_case(DType::kQ4_K, {300, 200, 0, 412, 100, 500, 300, 236}, 2048, {1024, 1024}));
  // Batched decode attention, the kernel that bounds batch-64 decode: 64 sequences x 320
  // positions, SmolLM2's heads, a paged float16 cache with scattered blocks, each repetition
  // on another of 30 layers so the keys come from memory. GB/s of KV read.
  std::vector<AttnSeq> decode(64, AttnSeq{1, 319});
  cases.push_back(attention_case(AttnShape{9, 3, 64, 0, DType::kF16, 16, 1, 30}, decode));
  cases.push_back(attention_case(AttnShape{9, 3, 64, 0, DType::kF16, 16}, {{512, 0}}));
  // Long-context prefill: the last 512-token chunk of an 8K prompt, whose keys (6 MB of KV per
  // layer for SmolLM2) are past the L2; and Gemma 3's one KV head of 256.
  cases.push_back(attention_case(AttnShape{9, 3, 64, 0, DType::kF16, 16}, {{512, 7680}}));
  cases.push_back(attention_case(AttnShape{4, 1, 256, 0, DType::kF16, 16}, {{512, 7680}}));
  // Long-context decode of one sequence: few heads (Gemma 3 has one KV head) for two threads.
  cases.push_back(attention_case(AttnShape{9, 3, 64, 0, DType::kF16, 16}, {{1, 8191}}));
  cases.push_back(attention_case(AttnShape{4, 1, 256, 0, DType::kF16, 16}, {{1, 8191}}));
  cases.push_back(store_kv_case(DType::kF16, 3, 64, 16, {{256, 0}}, {0}));
  cases.push_back(embed_case(DType::kQ8_0, 49152, 576, [] {
    std::vector<int32_t> t(256);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((1000 + 7919 * i) % 49152);
    return t;
  }()));
  cases.push_back(rms_norm_case(256, 2048, 1e-5f, Placement::kOutOfPlace));
  cases.push_back(rope_case(RopePairing::kHalf, 9, 64, 64, 10000.0, {{256, 0}}));
  cases.push_back(gated_case(Activation::kSilu, 256, 8192));
  cases.push_back(gated_case(Activation::kGeluTanh, 256, 8192));
  cases.push_back(add_case(256, 2048));
  cases.push_back(scale_case(256, 2048, 0.125f));
  cases.push_back(soft_cap_case(4, 262144, 30.0f));
  cases.push_back(gather_output_rows_case(256, 2048, iota(64)));
  cases.push_back(route_top_k_case(256, 64, 8, Renormalize::kYes));
  cases.push_back(moe_dispatch_case(256, 8, 64, 64));
  cases.push_back(moe_gather_case(256, 8, 64, 2048));
  cases.push_back(moe_combine_case(256, 8, 64, 2048));
  return cases;
}

}  // namespace

std::vector<OpCase> op_cases(CaseSet set) {
  switch (set) {
    case CaseSet::kCi:
    case CaseSet::kFull: return check_cases(set);
    case CaseSet::kPerf: return perf_cases();
  }
  return {};
}

}  // namespace deepinfer::backend::harness
