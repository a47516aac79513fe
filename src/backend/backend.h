// The backend seam: what a forward pass needs from a device, and nothing about which device.
//
// An architecture file (src/model/arch) declares hyperparameters, binds its tensors through a
// WeightStore and writes the order of its ops against a Queue; it never names a CPU or CUDA
// kernel. Each backend implements this one table: the CPU backend (backend/cpu) with its SIMD
// kernels, and its "cpu-reference" variant with the scalar reference kernels that every backend
// is tested against (tests/ops, the op harness in backend/op_harness.h). A CUDA backend is a
// third implementation of the same classes.
//
// Ownership and threads. A Backend is created once per engine (create_backend) and outlives
// everything it made. It hands out device memory (DeviceBuffer), weight stores (one per loaded
// model), KV caches (one per engine or context) and queues (one per thread that runs passes). A
// Queue is used by one thread at a time: ops are enqueued in order and may run later (on a GPU
// stream) or at once (the CPU backend runs each on its thread pool before returning); sync()
// waits for them all and reports the first failure. Tensors are views into device memory; host
// data crosses only through Queue::upload / download and the step description (set_batch).
//
// Missing kernels are load-time errors: a model asks supports() (through require()) for every
// op it will enqueue, and WeightStore::add_matrix refuses a weight format it cannot multiply, so
// an unsupported model fails to load with a message naming the op, never crashes in a step.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/kv_group_spec.h"
#include "core/thread_pool.h"
#include "deepinfer/status.h"

namespace deepinfer::backend {

// ---- Memory ----

// A view of a contiguous row-major matrix in device memory: rows x cols elements of dtype, row r
// at element r * cols. Vectors are one row. Does not own its memory.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t n_elements() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(rows) * dtype_row_bytes(dtype, cols); }
  bool empty() const { return data == nullptr; }
  // Rows [first, first + n).
  Tensor view_rows(int64_t first, int64_t n) const;
  // The same elements as rows x cols (rows * cols must equal n_elements()).
  Tensor reshaped(int64_t new_rows, int64_t new_cols) const;
  // Host address of the data: only meaningful on a backend whose memory is host memory.
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
};

// Device memory, released through the backend that allocated it. Move-only.
class DeviceBuffer {
 public:
  using Release = void (*)(void* data, size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, Release release) : data_(data), bytes_(bytes), release_(release) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // The buffer's first rows * cols elements as a tensor (which must fit).
  Tensor tensor(DType dtype, int64_t rows, int64_t cols) const;

 private:
  void reset();

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Release release_ = nullptr;
};

// ---- Weights ----

// A weight matrix prepared for one backend's products: n_out rows of n_in elements in its stored
// format (GGUF block formats or F32/F16/BF16). `handle` is the backend's own record (the CPU's
// packed copy, a GPU's device copy); valid while the WeightStore that made it lives.
struct Matrix {
  DType dtype = DType::kF32;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const void* handle = nullptr;
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;
  // A matrix stored row-major at `data` (a mapped file, which must outlive the store: a
  // backend may read it in place). UNIMPLEMENTED, naming `name`, for a format the backend
  // cannot multiply.
  virtual Result<Matrix> add_matrix(std::string_view name, DType dtype, const uint8_t* data, int64_t n_out,
                                    int64_t n_in) = 0;
  // A float32 vector (norm weights, biases, rope frequencies) copied into the store: [1, n].
  virtual Result<Tensor> add_vector(std::span<const float> values) = 0;
  // Memory the store holds beyond the mapped files (packed or device copies).
  virtual size_t bytes() const = 0;
};

// ---- KV memory ----

// The KV memory of every group of a model (KvGroupSpec, filled in: dtype, block size and pool
// sizes), laid out as the backend's attention reads it.
class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual const std::vector<KvGroupSpec>& groups() const = 0;
  virtual size_t bytes() const = 0;
  // Names the physical layout of a block ("cpu-panels-1"). With the element type it decides
  // whether blocks written by one process can be read by another (the prefix-cache key).
  virtual std::string_view layout() const = 0;
  // Block `block` of group `group`, every layer of the group, as bytes in the layout above:
  // for each of the group's layers in order, its K block then its V block (K alone in a k_only
  // group; KvGroupSpec::block_bytes() in all). For moving blocks between caches (a KV store) and for
  // tests; out of range is INVALID_ARGUMENT.
  virtual Status read_block(int group, int32_t block, std::span<uint8_t> out) const = 0;
  virtual Status write_block(int group, int32_t block, std::span<const uint8_t> in) = 0;
  // Commits the cache's memory now rather than on first use (a server, whose steps would
  // otherwise stop for page faults until every block has been used once). Contents unchanged.
  virtual void prefault() {}
};

// ---- One forward pass's inputs ----

inline constexpr int kMaxKvGroups = 8;

// One sequence's part of a flattened batch: its next n_tokens tokens (consecutive in the
// batch) at positions first_position.., with, per KV group (KvCache::groups() order), the
// table that maps logical block (position / block size) to pool block. Entries no query of the
// step can see may be -1.
struct StepSequence {
  int64_t n_tokens = 0;
  int64_t first_position = 0;
  std::array<std::span<const int32_t>, kMaxKvGroups> block_tables{};
  // Per group: no KV exists below this position (SWA bounded replay rebuilt the window from
  // here), so attention reads start at it.
  std::array<int64_t, kMaxKvGroups> min_position{};
  // Per group: rows below this position are left as they are (prefix-cached rows that other
  // sequences share); store_kv skips them.
  std::array<int64_t, kMaxKvGroups> first_write{};
};

// A step as host plain data. The spans must stay valid until the queue's next sync().
struct StepBatch {
  std::span<const int32_t> tokens;             // [n_tokens], sequence after sequence
  std::span<const StepSequence> sequences;
  std::span<const int32_t> output_rows;        // batch rows whose hidden state becomes logits
};

// ---- The op table ----

enum class RopePairing { kInterleaved, kHalf };  // (x[2i], x[2i+1]) or (x[i], x[i + n_rot/2])
enum class Activation { kSilu, kGeluTanh };

struct RopeParams {
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t n_rot = 0;  // rotated channels at the start of each head (== head_dim unless partial)
  RopePairing pairing = RopePairing::kHalf;
  bool trailing = false;  // rotate the last n_rot channels of each head instead of the first (DeepSeek V4)
  bool inverse = false;   // rotate by -position: V4 undoes on the attention output the rope its values carried
  int64_t position_offset = 0;  // rotate at position + offset (V4.1: a compressed row at its first token's)
};

// ---- DeepSeek V4 ops (model/arch/deepseek_v4.cpp) ----

// mHC, manifold-constrained hyper-connections: n_streams residual streams of width d per token.
struct HyperParams {
  int64_t n_streams = 4;
  int64_t sinkhorn_iters = 20;
  float eps = 1e-6f;  // hc_eps
};

// A compressor over one KV group of per-token frontier rows (kCompressorState: K = the token's kv
// projection, V = its gate projection, `width` each) that emits compressed rows into a group of
// tokens_per_row = rate. overlap (CSA): width = 2 * head_dim, and entry w pools the first halves
// of tokens rate*(w-1) .. rate*w - 1 with the second halves of tokens rate*w .. rate*w + rate - 1
// (2 * rate slots); otherwise (HCA) width = head_dim and entry w pools its own rate tokens.
struct CompressParams {
  int64_t rate = 4;
  int64_t head_dim = 0;
  bool overlap = false;
  float eps = 1e-6f;  // of the RMSNorm over each entry
  int64_t n_rot = 0;  // trailing channels roped (interleaved pairs) at the entry's first position
};

// The lightning indexer: per query, the top_k compressed entries (of rate tokens each) it may
// see, by score sum_h weights[h] * relu(q_h . k_w) * scale.
//
// Hierarchical candidates (V4.1): entries grouped in blocks of candidate_block. kSelect: the
// query's top candidate_top_blocks blocks by their best visible entry's score, its newest
// visible block always among them, go to `candidates` [n, candidate_top_blocks] (i32 block
// ids, -1 past the count); its own selection is not restricted. kRestrict: only entries of the
// blocks `candidates` lists (as a kSelect layer left them) may be selected.
enum class CandidateUse { kNone, kSelect, kRestrict };

struct IndexParams {
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t rate = 4;
  int64_t top_k = 0;
  float scale = 1.0f;
  CandidateUse candidates = CandidateUse::kNone;
  int64_t candidate_block = 0;
  int64_t candidate_top_blocks = 0;
};

// Single-KV-head attention (K = V) with a learned sink per head over a sliding window and, when
// rate > 0, compressed rows of rate tokens each.
struct SparseAttentionParams {
  int64_t n_head = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0;  // a query at p sees window rows p - window + 1 .. p
  int64_t rate = 0;    // 0: no compressed rows
  int32_t compressed_layer = -1;  // the layer whose compressed rows are read (V4.1 shares them); -1: `layer`
};

// DSpark's draft blocks (V4.1): each sequence of the batch is one block of `block` rows at
// positions a .. a + block - 1 (a: its anchor). Every row attends, K = V, to the window rows
// a - window .. a - 1 of its layer in the KV group (the target context the draft layers
// observed) and to all rows of its own block (given in the pass, not cached), plus a sink.
struct BlockAttentionParams {
  int64_t n_head = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0;
  int64_t block = 0;
};

// A cache format's round trip (V4.1 keeps its caches in these; the reference rounds through
// them in the forward): each run of `block` channels of a row shares one scale.
//   kFp8E4M3: scale = 2^ceil(log2(max(amax, 1e-4) / 448)), values to e4m3 (nearest, even).
//   kMxfp4:   scale = 2^ceil(log2(max(amax, 6 * 2^-126) / 6)), values to e2m1 (nearest, even).
//   kNvfp4:   scale = e4m3(max(amax, 6 * 2^-9) / 6), values to e2m1 (nearest, even).
enum class CacheFormat { kFp8E4M3, kMxfp4, kNvfp4 };

struct AttentionParams {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // heads share KV in groups of n_head / n_head_kv (GQA)
  int64_t head_dim = 0;
  float scale = 1.0f;     // multiplies q·k
  int64_t window = 0;     // 0: full causal attention; else a query at p sees p - window + 1 .. p
};

// One output of matmul_group: y = x Wᵀ (+ bias).
struct MatmulTarget {
  const Matrix* w = nullptr;
  Tensor y;             // [n_tokens, w->n_out]
  Tensor bias;          // [1, w->n_out], or empty
};

// One output of grouped_matmul: rows [offsets[e], offsets[e + 1]) of x times experts[e].
struct GroupedTarget {
  std::span<const Matrix> experts;
  Tensor y;             // [x.rows, experts[e].n_out]
};

enum class Op {
  kUpload, kDownload, kEmbed, kMatmul, kRmsNorm, kRope, kGatedActivation, kAdd, kScale, kSoftCap,
  kStoreKv, kAttention, kGatherOutputRows, kRouteTopK, kMoeDispatch, kMoeGather, kGroupedMatmul,
  kMoeCombine, kClamp, kHyperPre, kHyperPost, kRouteSqrtSoftplus, kCompressKv, kIndexTopK, kSparseAttention,
  kCompressRows, kCacheRoundTrip, kGatherRows, kEngramMix, kBlockAttention, kMatmulArgmax,
};
std::string_view op_name(Op op);

// What a model will enqueue: an op, the element type it reads (weights of kMatmul, KV of
// kAttention and kStoreKv, else f32) and a variant (RopePairing or Activation as an int).
struct OpUse {
  Op op;
  DType dtype = DType::kF32;
  int variant = 0;
};
std::string describe(const OpUse& use);  // "rope (interleaved pairs)", "matmul of q4_K weights"

class Queue {
 public:
  virtual ~Queue() = default;

  // Host -> device (dst.bytes() bytes) and device -> host; a download's bytes are in `host`
  // after sync().
  virtual void upload(const void* host, const Tensor& dst) = 0;
  virtual void download(const Tensor& src, void* host) = 0;

  // The step the following ops belong to (tokens, positions, block tables, output rows).
  virtual Status set_batch(const StepBatch& batch) = 0;

  // out[t] = row tokens[t] of `table`, widened to f32. out: [n_tokens, table.n_in].
  virtual void embed(const Matrix& table, const Tensor& out) = 0;
  // y = x Wᵀ (+ bias): x [n, w.n_in], y [n, w.n_out]. A row's result never depends on the
  // other rows (batch invariance).
  virtual void matmul(const Matrix& w, const Tensor& x, const Tensor& y, const Tensor& bias) = 0;
  // Several products of one x (q/k/v, gate/up); each output equals matmul's bit for bit.
  virtual void matmul_group(std::span<const MatmulTarget> targets, const Tensor& x) = 0;
  // The greedy choice of each row of y = x Wᵀ, y never stored: best[r] = the first column of
  // row r's largest value (NaN never the largest; a row of NaN only: 0), y's values being
  // matmul's bit for bit. x [n, w.n_in], best [n, 1] (i32). An output head's greedy tokens
  // without writing and reading back n rows of logits.
  virtual void matmul_argmax(const Matrix& w, const Tensor& x, const Tensor& best) = 0;
  // out = x / rms(x) * w, row by row: x, out [rows, n] (in place allowed), w [1, n]. The sum of
  // squares in double, element i into partial sum i % 32 by fma, the 32 folded 16, 8, 4, 2, 1
  // apart; then x * (1 / sqrt(float(sum / n) + eps)) * w (cpu/ops.h).
  virtual void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) = 0;
  // Rotary embedding in place at the batch's positions: x [n_tokens, n_heads * head_dim],
  // inv_freq [1, n_rot / 2]; channel pairs of each head rotate by position * inv_freq[i].
  virtual void rope(const Tensor& x, const RopeParams& params, const Tensor& inv_freq) = 0;
  // gate = act(gate) * up, elementwise (same shapes).
  virtual void gated_activation(Activation act, const Tensor& gate, const Tensor& up) = 0;
  virtual void add(const Tensor& x, const Tensor& y) = 0;        // x += y
  virtual void scale(const Tensor& x, float factor) = 0;         // x *= factor
  virtual void soft_cap(const Tensor& x, float cap) = 0;         // x = cap tanh(x / cap), cap > 0
  // Each batch token's K and V rows ([n_tokens, n_head_kv * head_dim] each) into its slot of
  // layer `layer` of KV group `group`, converted to the group's element type. In a group of
  // tokens_per_row = r > 1 (compressed rows, K only) the token at p with (p + 1) % r == 0 writes
  // row (p + 1) / r - 1, unless that row's first position is below first_write; other tokens
  // write nothing.
  virtual void store_kv(KvCache& kv, int group, int32_t layer, const Tensor& k, const Tensor& v) = 0;
  // Causal attention of the batch's queries q [n_tokens, n_head * head_dim] (rotated, not
  // scaled) against their sequences' KV of (group, layer): out [n_tokens, n_head * head_dim].
  virtual void attention(const AttentionParams& params, const Tensor& q, const KvCache& kv, int group,
                         int32_t layer, const Tensor& out) = 0;
  // out[r] = x[output_rows[r]]: x [n_tokens, n], out [n_output_rows, n].
  virtual void gather_output_rows(const Tensor& x, const Tensor& out) = 0;

  // Mixture of experts, in four steps:
  //   route_top_k   softmax over each row of logits [n, n_expert], the k best experts (ties:
  //                 lower index) into ids [n, k] (i32) with their probabilities in weights
  //                 [n, k], renormalised to sum 1 with `renormalize`;
  //   moe_dispatch  the n * k (token, slot) pairs sorted by expert, stable: order [1, n * k]
  //                 (i32, token * k + slot), offsets [1, n_expert + 1] (i32, each expert's
  //                 first entry);
  //   moe_gather    xs[i] = x[order[i] / k]: x [n, d], xs [n * k, d];
  //   grouped_matmul, gated_activation, grouped_matmul over xs;
  //   moe_combine   out[t] = sum of weights[slot] * ys[i] over token t's entries i, in
  //                 expert order: ys [n * k, d], out [n, d].
  virtual void route_top_k(const Tensor& logits, int64_t k, bool renormalize, const Tensor& ids,
                           const Tensor& weights) = 0;
  virtual void moe_dispatch(const Tensor& ids, int64_t n_expert, const Tensor& order, const Tensor& offsets) = 0;
  virtual void moe_gather(const Tensor& x, const Tensor& order, int64_t k, const Tensor& xs) = 0;
  virtual void grouped_matmul(std::span<const GroupedTarget> targets, const Tensor& offsets, const Tensor& x) = 0;
  virtual void moe_combine(const Tensor& ys, const Tensor& order, const Tensor& weights, const Tensor& out) = 0;

  // ---- DeepSeek V4 ----
  // x = min(max(x, lo), hi), elementwise.
  virtual void clamp(const Tensor& x, float lo, float hi) = 0;
  // mHC weights of one site from mixes [n, (2 + s) * s] (fn times the RMS-normalised streams, by
  // matmul), base [1, (2 + s) * s] and scale [1, 3]:
  //   pre_i  = sigmoid(scale0 m_i + base_i) + eps,   post_i = 2 sigmoid(scale1 m_{s+i} + base_{s+i}),
  //   comb   = softmax over each row of scale2 m_{2s..} + base_{2s..} (s x s, row j = input stream),
  //            + eps, then sinkhorn_iters column/row normalisations (column first, each sum + eps);
  // collapsed [n, d] = sum_i pre_i streams_i, with streams [n, s * d]. With post and comb empty
  // it is the final head: mixes, base [.., s] and scale [1, 1] give pre alone. pre [n, s], when
  // not empty, receives the pre weights (V4.1 collapses the next site's input with them).
  virtual void hyper_pre(const HyperParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
                         const Tensor& scale, const Tensor& collapsed, const Tensor& post, const Tensor& comb,
                         const Tensor& pre) = 0;
  // out_streams_k = post_k * x + sum_j comb[j, k] streams_j: streams, out_streams [n, s * d], x [n, d].
  virtual void hyper_post(const HyperParams& p, const Tensor& streams, const Tensor& x, const Tensor& post,
                          const Tensor& comb, const Tensor& out_streams) = 0;
  // V4 routing: scores sqrt(softplus(logits)) [n, n_expert]; ids [n, k] the top k of scores +
  // bias ([1, n_expert]; ties: lower index), or the given fixed_ids [n, k] (hash routing) when not
  // empty; weights [n, k] the chosen scores over their sum (+ 1e-20), times `scale`.
  virtual void route_sqrt_softplus(const Tensor& logits, const Tensor& bias, const Tensor& fixed_ids, int64_t k,
                                   float scale, const Tensor& ids, const Tensor& weights) = 0;
  // For each batch token at position p with (p + 1) % rate == 0: entry w = (p + 1) / rate - 1 of
  // layer `layer` from the state group's rows (CompressParams), each channel a softmax over its
  // slots of gate + ape[position % rate] weighting kv, RMSNorm with `norm` [1, head_dim], rope
  // at position w * rate (inv_freq [1, n_rot / 2]), stored in out_group. State rows must hold
  // every slot's token (stored earlier in the step or in earlier steps). Entries whose first
  // position is below the sequence's first_write of out_group (a shared prefix, replayed after
  // a hit) are neither computed nor stored: their state rows need not exist.
  virtual void compress_kv(const CompressParams& p, KvCache& kv, int state_group, int out_group, int32_t layer,
                           const Tensor& ape, const Tensor& norm, const Tensor& inv_freq) = 0;
  // compress_kv's entries as rows of the batch, unrotated: out [n_tokens, head_dim] holds, at
  // each token that closes an entry, that entry (pooled, RMSNorm with `norm`), and zeros at the
  // others (and at entries below the out group's first_write: pass it as rows_group). V4.1's
  // compressed rows and index keys are both derived from these latents.
  virtual void compress_rows(const CompressParams& p, const KvCache& kv, int state_group, int rows_group,
                             int32_t layer, const Tensor& ape, const Tensor& norm, const Tensor& out) = 0;
  // x [rows, cols] in place through `format` and back, cols a multiple of block.
  virtual void cache_round_trip(const Tensor& x, CacheFormat format, int64_t block) = 0;
  // out row i * k + j = row ids[i, j] of `table`, widened to f32: ids [n, k] (i32, each in
  // [0, table.n_out)), out [n, k * table.n_in] (V4.1's Engram tables).
  virtual void gather_rows(const Matrix& table, const Tensor& ids, const Tensor& out) = 0;
  // V4.1's Engram update of the streams [n, s * d], in place, from kv [n, (s + 1) * d] (a key per
  // stream, then one value) and weight [1, s * d]: per stream i,
  //   dot = sum_c x_c w_c k_c / (rms(x) rms(k) sqrt(d)),  rms(v) = sqrt(mean(v^2) + eps),
  //   x += sigmoid(sign(dot) sqrt(max(|dot|, 1e-6))) * value.
  virtual void engram_mix(const Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) = 0;
  // out [n, n_head * head_dim]: BlockAttentionParams over q [n, n_head * head_dim] (roped), the
  // window rows of (group, layer) and the blocks' own rows block_kv [n, head_dim].
  virtual void block_attention(const BlockAttentionParams& p, const Tensor& q, const KvCache& kv, int group,
                               int32_t layer, const Tensor& block_kv, const Tensor& sinks, const Tensor& out) = 0;
  // ids [n, top_k] (i32): each query's best-scoring visible entries (w < (p + 1) / rate) of
  // (group, layer), best first (ties: lower index), -1 past the visible count. q [n, n_heads *
  // head_dim] (roped), weights [n, n_heads]. candidates: see IndexParams (empty with kNone).
  virtual void index_top_k(const IndexParams& p, const Tensor& q, const Tensor& weights, const KvCache& kv,
                           int group, int32_t layer, const Tensor& ids, const Tensor& candidates) = 0;
  // out [n, n_head * head_dim]: each head's softmax over its window rows of (window_group, layer),
  // the visible compressed rows of (compressed_group, layer) (w < (p + 1) / rate; only those in
  // `selected` [n, top_k] when it is not empty, -1 entries skipped) and its sink (sinks [1,
  // n_head], a logit in the denominator only), weighting the same rows as values.
  virtual void sparse_attention(const SparseAttentionParams& p, const Tensor& q, const KvCache& kv, int window_group,
                                int compressed_group, int32_t layer, const Tensor& sinks, const Tensor& selected,
                                const Tensor& out) = 0;

  // Waits for every op enqueued since the last sync and returns the first failure among them
  // (out of memory, a failed launch); after a failure the queue is usable again.
  virtual Status sync() = 0;
};

struct BackendOptions {
  ThreadPool* pool = nullptr;  // CPU: the threads the kernels fan out over (required); borrowed
};

// A device's arithmetic peak, measured in the process (bench ops reads each kernel against it):
// 0 where a rate is not measured. int8 is the rate quantized-weight products multiply at; note
// names what the figures leave out ("AMX tiles absent").
struct PeakRates {
  double f32_gflops = 0.0;
  double int8_gops = 0.0;
  double bf16_gflops = 0.0;
  std::string note;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;   // "cpu", "cpu-reference", "cuda"
  virtual std::string describe() const = 0;    // "cpu (avx512 kernels, 2 threads)"
  virtual bool supports(const OpUse& use) const = 0;

  // Device memory of `bytes` bytes (RESOURCE_EXHAUSTED when there is none left).
  virtual Result<DeviceBuffer> allocate(size_t bytes) = 0;
  virtual std::unique_ptr<WeightStore> new_weight_store() = 0;
  // KV memory for groups with dtype, block size and n_blocks set; zero-filled.
  virtual Result<std::unique_ptr<KvCache>> allocate_kv(std::vector<KvGroupSpec> groups) = 0;
  virtual std::unique_ptr<Queue> new_queue() = 0;
  // True where device memory is host memory (the CPU backends): after a queue's sync() the host
  // may read a buffer's data in place instead of downloading a copy.
  virtual bool host_memory() const { return false; }
  // Runs for a fraction of a second on the backend's threads or device.
  virtual PeakRates measure_peak() { return {}; }
};

// "cpu" (the default), "cpu-reference"; NOT_FOUND naming the backends this build has otherwise.
Result<std::unique_ptr<Backend>> create_backend(std::string_view name, const BackendOptions& options);
// The backends this build can create on this machine, the default first.
std::vector<std::string> available_backends();

// OK when `backend` supports every use; else UNIMPLEMENTED: "<what> needs <op>, which the <name>
// backend does not have".
Status require(const Backend& backend, std::span<const OpUse> uses, std::string_view what);

}  // namespace deepinfer::backend
