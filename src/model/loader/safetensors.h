// Hugging Face model directories: config.json, model.safetensors or shards listed in
// model.safetensors.index.json (F32, F16, BF16 tensors, memory-mapped; block-scaled FP8 / FP4
// with their scales, multiplied out to BF16 once, see block_scaled.h). config.json becomes
// GGUF-style metadata keys and Hugging Face tensor names become GGUF-style names, so
// architecture code reads one vocabulary (see tensor_source.h).
#pragma once

#include <memory>
#include <string>

#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"

namespace deepinfer {

// `dir` holds config.json. Errors name the file and the problem (missing config.json,
// truncated header, offsets past the end, unsupported dtype, unknown architecture).
Result<std::unique_ptr<TensorSource>> open_safetensors(const std::string& dir, const LoadOptions& options = {});

}  // namespace deepinfer
