// Architecture registry: general.architecture -> the code that binds and runs it.
//
// Adding an architecture means one file in src/model/arch/ that defines its hyperparameter
// reading, tensor binding and forward pass, plus one entry in registry.cpp
// (docs/adding-a-model.md).
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"
#include "model/model.h"

namespace deepinfer {

using ModelFactory = Result<std::unique_ptr<Model>> (*)(std::unique_ptr<TensorSource> source);

struct ArchEntry {
  std::string_view name;  // general.architecture
  ModelFactory create;
};

std::span<const ArchEntry> registered_architectures();
const ArchEntry* find_architecture(std::string_view name);

// Defined by each architecture file.
Result<std::unique_ptr<Model>> create_llama_family_model(std::unique_ptr<TensorSource> source);
Result<std::unique_ptr<Model>> create_gemma3_model(std::unique_ptr<TensorSource> source);
Result<std::unique_ptr<Model>> create_qwen3_model(std::unique_ptr<TensorSource> source);
Result<std::unique_ptr<Model>> create_qwen3_moe_model(std::unique_ptr<TensorSource> source);

}  // namespace deepinfer
