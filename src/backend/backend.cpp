#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"

namespace deepinfer::backend {

Tensor Tensor::view_rows(int64_t first, int64_t n) const {
  DI_ICHECK(first >= 0 && n >= 0 && first + n <= rows);
  Tensor t = *this;
  t.data = static_cast<uint8_t*>(data) + static_cast<size_t>(first) * dtype_row_bytes(dtype, cols);
  t.rows = n;
  return t;
}

Tensor Tensor::reshaped(int64_t new_rows, int64_t new_cols) const {
  DI_ICHECK(new_rows * new_cols == n_elements());
  Tensor t = *this;
  t.rows = new_rows;
  t.cols = new_cols;
  return t;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    release_ = other.release_;
    other.data_ = nullptr;
    other.bytes_ = 0;
    other.release_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (data_ != nullptr && release_ != nullptr) release_(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor DeviceBuffer::tensor(DType dtype, int64_t rows, int64_t cols) const {
  Tensor t{data_, dtype, rows, cols};
  DI_ICHECK(t.bytes() <= bytes_);
  return t;
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kUpload: return "upload";
    case Op::kDownload: return "download";
    case Op::kEmbed: return "embed";
    case Op::kMatmul: return "matmul";
    case Op::kRmsNorm: return "rms_norm";
    case Op::kRope: return "rope";
    case Op::kGatedActivation: return "gated_activation";
    case Op::kAdd: return "add";
    case Op::kScale: return "scale";
    case Op::kSoftCap: return "soft_cap";
    case Op::kStoreKv: return "store_kv";
    case Op::kAttention: return "attention";
    case Op::kGatherOutputRows: return "gather_output_rows";
    case Op::kRouteTopK: return "route_top_k";
    case Op::kMoeDispatch: return "moe_dispatch";
    case Op::kMoeGather: return "moe_gather";
    case Op::kGroupedMatmul: return "grouped_matmul";
    case Op::kMoeCombine: return "moe_combine";
    case Op::kClamp: return "clamp";
    case Op::kHyperPre: return "hyper_pre";
    case Op::kHyperPost: return "hyper_post";
    case Op::kRouteSqrtSoftplus: return "route_sqrt_softplus";
    case Op::kCompressKv: return "compress_kv";
    case Op::kIndexTopK: return "index_top_k";
    case Op::kSparseAttention: return "sparse_attention";
    case Op::kCompressRows: return "compress_rows";
    case Op::kCacheRoundTrip: return "cache_round_trip";
    case Op::kGatherRows: return "gather_rows";
    case Op::kEngramMix: return "engram_mix";
    case Op::kBlockAttention: return "block_attention";
    case Op::kMatmulArgmax: return "matmul_argmax";
  }
  return "unknown op";
}

std::string describe(const OpUse& use) {
  std::string s(op_name(use.op));
  switch (use.op) {
    case Op::kMatmul:
    case Op::kMatmulArgmax:
    case Op::kGroupedMatmul:
    case Op::kEmbed: return s + " of " + std::string(dtype_name(use.dtype)) + " weights";
    case Op::kAttention:
    case Op::kCompressKv:
    case Op::kIndexTopK:
    case Op::kSparseAttention:
    case Op::kCompressRows:
    case Op::kBlockAttention:
    case Op::kStoreKv: return s + " over a " + std::string(dtype_name(use.dtype)) + " KV cache";
    case Op::kRope:
      return s + (static_cast<RopePairing>(use.variant) == RopePairing::kInterleaved ? " (interleaved pairs)"
                                                                                      : " (half rotation)");
    case Op::kGatedActivation:
      return s + (static_cast<Activation>(use.variant) == Activation::kSilu ? " (SiLU)" : " (tanh GELU)");
    default: return s;
  }
}

Status require(const Backend& backend, std::span<const OpUse> uses, std::string_view what) {
  for (const OpUse& use : uses) {
    if (!backend.supports(use)) {
      return unimplemented(std::string(what) + " needs " + describe(use) + ", which the " +
                           std::string(backend.name()) + " backend does not have");
    }
  }
  return {};
}

Result<std::unique_ptr<Backend>> create_backend(std::string_view name, const BackendOptions& options) {
  if (name == "cpu" || name == "cpu-reference") {
    if (options.pool == nullptr) return invalid_argument("the cpu backend needs a thread pool");
    return cpu::make_cpu_backend(*options.pool, name == "cpu" ? cpu::KernelChoice::kFastest
                                                              : cpu::KernelChoice::kReference);
  }
  std::string known;
  for (const std::string& b : available_backends()) known += (known.empty() ? "" : ", ") + b;
  return not_found("no backend '" + std::string(name) + "' in this build (available: " + known + ")");
}

std::vector<std::string> available_backends() { return {"cpu", "cpu-reference"}; }

}  // namespace deepinfer::backend
