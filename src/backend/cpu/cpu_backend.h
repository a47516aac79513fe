// The CPU backend: backend.h's op table over the kernels of this folder, run on a thread pool.
//
// kFastest uses the fastest tier this CPU runs (AVX-512 VNNI, AVX2, scalar: quant.h picks from
// cpuid) with weights packed at load (packed.h); kReference uses the scalar reference kernels
// and unpacked weights: the oracle that tests/ops and the op harness compare every backend with.
// Both keep KV in cpu::KvLayout panels. Each op runs to completion on the pool before it returns,
// so sync() has nothing to wait for. The pool is borrowed and must outlive the backend; one
// queue at a time may use it (its threads are not shared between concurrent parallel_for calls).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

enum class KernelChoice { kFastest, kReference };

std::unique_ptr<backend::Backend> make_cpu_backend(ThreadPool& pool, KernelChoice choice);

}  // namespace deepinfer::cpu
