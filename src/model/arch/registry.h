// Architecture registry: general.architecture -> the code that binds and runs it.
//
// Adding an architecture means one file in src/model/arch/ that reads its hyperparameters,
// binds its tensors and writes its forward pass against the backend interface (or, for a
// transformer decoder, fills in decoder.h's spec), plus one entry in registry.cpp
// (docs/adding-a-model.md).
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"
#include "model/model.h"

namespace deepinfer {

using ModelFactory = Result<std::unique_ptr<Model>> (*)(std::unique_ptr<TensorSource> source,
                                                        backend::Backend& backend);

struct ArchEntry {
  std::string_view name;  // general.architecture
  ModelFactory create;
};

std::span<const ArchEntry> registered_architectures();
const ArchEntry* find_architecture(std::string_view name);

// Defined by each architecture file.
Result<std::unique_ptr<Model>> create_llama_model(std::unique_ptr<TensorSource> source, backend::Backend& backend);
Result<std::unique_ptr<Model>> create_gemma3_model(std::unique_ptr<TensorSource> source, backend::Backend& backend);
Result<std::unique_ptr<Model>> create_qwen3_model(std::unique_ptr<TensorSource> source, backend::Backend& backend);
Result<std::unique_ptr<Model>> create_qwen3_moe_model(std::unique_ptr<TensorSource> source, backend::Backend& backend);
Result<std::unique_ptr<Model>> create_deepseek_v4_model(std::unique_ptr<TensorSource> source, backend::Backend& backend);

}  // namespace deepinfer
