// GGUF reader (versions 2 and 3): header, metadata of every value type (nested arrays
// included), tensor infos, alignment, data offset. Tensors are views into a memory map.
#pragma once

#include <memory>
#include <string>

#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"

namespace deepinfer {

// Errors (each names the file): NOT_FOUND, DATA_LOSS for truncation, bad magic or offsets past
// the end, UNIMPLEMENTED for an unknown version or tensor type.
Result<std::unique_ptr<TensorSource>> open_gguf(const std::string& path);

}  // namespace deepinfer
