// EngineConfig's KV cache element type (public API) as the model layer's DType.
#pragma once

#include "core/dtype.h"
#include "deepinfer/engine.h"

namespace deepinfer {

inline DType kv_element_type(KvCacheDtype t) { return t == KvCacheDtype::kF16 ? DType::kF16 : DType::kF32; }

}  // namespace deepinfer
