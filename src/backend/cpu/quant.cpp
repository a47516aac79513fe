// Public entry points of quant.h: each picks, once per process, the fastest kernel this CPU runs
// for a type (AVX-512, then AVX2, then the scalar reference; cpuid decides, so one binary runs
// on any x86-64) and calls it through a table indexed by the GGML type id, so a call costs one
// indirect jump. DEEPINFER_ISA=scalar|avx2|avx512 caps the tier (for comparisons and tests).
#include "backend/cpu/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <array>
#include <cstdlib>
#include <string_view>

#include "backend/cpu/quant_kernels.h"
#include "core/check.h"

namespace deepinfer::cpu {

namespace {

constexpr size_t kNumTypeIds = 64;  // above every GGML type id that dtype.h knows

struct KernelTable {
  std::array<DequantizeRowFn, kNumTypeIds> dequantize{};
  std::array<QuantizeRowFn, kNumTypeIds> quantize{};
  std::array<VecDotFn, kNumTypeIds> vec_dot{};
  std::array<VecDot4Fn, kNumTypeIds> vec_dot4{};  // from the same tier as vec_dot, or null
  std::array<GemmFn, kNumTypeIds> gemm{};         // from the same tier as vec_dot, or null
  std::array<int64_t, kNumTypeIds> block_size{};
  Isa top = Isa::kScalar;  // the highest tier in use
};

template <typename Fn>
Fn first_of(Fn a, Fn b, Fn c) {
  return a ? a : b ? b : c;
}

Isa top_isa() {
  Isa top = Isa::kScalar;
  if (cpu_has(Isa::kAvx2)) top = Isa::kAvx2;
  if (cpu_has(Isa::kAvx512)) top = Isa::kAvx512;
  if (const char* cap = std::getenv("DEEPINFER_ISA")) {
    const std::string_view v(cap);
    if (v == "scalar") top = Isa::kScalar;
    if (v == "avx2" && top == Isa::kAvx512) top = Isa::kAvx2;
  }
  return top;
}

KernelTable build_table() {
  KernelTable t;
  t.top = top_isa();
  const bool use512 = t.top >= Isa::kAvx512;
  const bool use2 = t.top >= Isa::kAvx2;
  for (uint32_t id = 0; id < kNumTypeIds; ++id) {
    const auto type = dtype_from_ggml_id(id);
    if (!type) continue;
    t.block_size[id] = dtype_traits(*type)->block_size;
    t.dequantize[id] = ref::dequantize_row_fn(*type);
    t.quantize[id] = first_of(use512 ? avx512::quantize_row_fn(*type) : nullptr,
                              use2 ? avx2::quantize_row_fn(*type) : nullptr, ref::quantize_row_fn(*type));
    if (use512 && avx512::vec_dot_fn(*type)) {
      t.vec_dot[id] = avx512::vec_dot_fn(*type);
      t.vec_dot4[id] = avx512::vec_dot4_fn(*type);
      t.gemm[id] = avx512::gemm_fn(*type);
    } else if (use2 && avx2::vec_dot_fn(*type)) {
      t.vec_dot[id] = avx2::vec_dot_fn(*type);
      t.vec_dot4[id] = avx2::vec_dot4_fn(*type);
      t.gemm[id] = avx2::gemm_fn(*type);
    } else {
      t.vec_dot[id] = ref::vec_dot_fn(*type);
    }
  }
  return t;
}

const KernelTable& table() {
  static const KernelTable t = build_table();
  return t;
}

size_t index_of(DType type) {
  const auto id = static_cast<size_t>(type);
  DI_ICHECK(id < kNumTypeIds);
  return id;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "scalar";
}

#if defined(__x86_64__) || defined(__i386__)
namespace {
// CPUID leaf 1, ECX bit 29. Not through __builtin_cpu_supports: clang 14 does not know "f16c".
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
}
}  // namespace
#endif

bool cpu_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return avx2::vec_dot_fn(DType::kQ8_0) != nullptr && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::kAvx512:
      return cpu_has(Isa::kAvx2) && avx512::gemm_fn(DType::kQ4_0) != nullptr && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

Isa kernel_tier() { return table().top; }

const char* kernel_isa() { return isa_name(kernel_tier()); }

bool quant_supported(DType type) {
  const auto id = static_cast<size_t>(type);
  return id < kNumTypeIds && table().vec_dot[id] != nullptr;
}

DType vec_dot_type(DType weight_type) {
  switch (weight_type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kMXFP4: return DType::kF32;  // products exact: the BF16 path's, in other sums
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: return DType::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1: return DType::kQ8_1;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return DType::kQ8_K;
    default: break;
  }
  DI_ICHECK(false && "vec_dot_type of a type without a dot product");
  return DType::kF32;
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const KernelTable& t = table();
  const size_t id = index_of(type);
  DI_ICHECK(t.dequantize[id] != nullptr && n % t.block_size[id] == 0);
  t.dequantize[id](src, dst, n);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const KernelTable& t = table();
  const size_t id = index_of(type);
  DI_ICHECK(t.quantize[id] != nullptr && n % t.block_size[id] == 0);
  t.quantize[id](src, dst, n);
}

float vec_dot(DType weight_type, const void* weight_row, const void* activation_row, int64_t n) {
  const KernelTable& t = table();
  const size_t id = index_of(weight_type);
  // The block-size check is a division, too dear per row in release builds.
  DI_ICHECK(t.vec_dot[id] != nullptr);
  DI_DCHECK(n % t.block_size[id] == 0);
  return t.vec_dot[id](weight_row, activation_row, n);
}

GemmFn gemm_fn(DType weight_type) { return table().gemm[index_of(weight_type)]; }

void vec_dot_x4(DType weight_type, const void* weight_row, const void* const* activation_rows, int64_t n,
                float* out) {
  const KernelTable& t = table();
  const size_t id = index_of(weight_type);
  if (t.vec_dot4[id] != nullptr) {
    t.vec_dot4[id](weight_row, activation_rows, n, out);
    return;
  }
  DI_ICHECK(t.vec_dot[id] != nullptr);
  for (int c = 0; c < 4; ++c) out[c] = t.vec_dot[id](weight_row, activation_rows[c], n);
}

}  // namespace deepinfer::cpu
