// The arithmetic peak of this CPU, measured in the process (as the triad measures memory
// bandwidth), so that a kernel's rate can be read as a fraction of what the cores can do:
// independent chains of one instruction kept in registers, on every thread of the pool at once.
#pragma once

#include "core/thread_pool.h"

namespace deepinfer::cpu {

struct PeakRates {
  double f32_gflops = 0.0;   // vfmadd231ps on zmm (AVX-512) or ymm (AVX2): 2 flops per lane
  double int8_gops = 0.0;    // vpdpbusd on zmm (AVX-512 VNNI) or vpmaddubsw on ymm (AVX2): 2 ops per byte pair
  double bf16_gflops = 0.0;  // vdpbf16ps on zmm (AVX512-BF16): 2 flops per pair; 0 without it
  bool amx = false;          // the CPU lists AMX tiles (AMX-INT8 and AMX-BF16); no kernel uses them yet
};

// About 0.1 s per rate on every thread of `pool`: the best of three rounds.
PeakRates measure_peak_rates(ThreadPool& pool);

// The AVX-512 halves (peak_avx512.cpp): operations per call of `iterations` rounds on one
// thread. Call only where cpu_has(Isa::kAvx512); the bf16 one only where the CPU has AVX512-BF16.
namespace avx512 {
double peak_f32_fma(long iterations);
double peak_int8_dot(long iterations);
double peak_bf16_dot(long iterations);
bool compiled_bf16();
}  // namespace avx512

// The AVX2 tier's (peak_avx2.cpp): vfmadd231ps and vpmaddubsw on ymm. Call only where
// cpu_has(Isa::kAvx2).
namespace avx2 {
double peak_f32_fma(long iterations);
double peak_int8_dot(long iterations);
}  // namespace avx2

}  // namespace deepinfer::cpu
