#include "model/arch/registry.h"

#include <array>

namespace deepinfer {

namespace {
// Every architecture here but deepseek_v4 (deepseek_v4.cpp, its own forward pass) runs the shared
// decoder (decoder.h); each file fills in its spec.
// Llama 2/3, SmolLM2, Mistral (GGUF and HF both say "llama" after loading) and Qwen2 differ
// only in hyperparameters (biases, rotary pairing, scaling, window).
constexpr std::array kArchitectures = {
    ArchEntry{"llama", &create_llama_model},
    ArchEntry{"qwen2", &create_llama_model},
    ArchEntry{"gemma3", &create_gemma3_model},
    ArchEntry{"qwen3", &create_qwen3_model},
    ArchEntry{"qwen3moe", &create_qwen3_moe_model},
    ArchEntry{"deepseek_v4", &create_deepseek_v4_model},
    ArchEntry{"deepseek_v41", &create_deepseek_v4_model},
};
}  // namespace

std::span<const ArchEntry> registered_architectures() { return kArchitectures; }

const ArchEntry* find_architecture(std::string_view name) {
  for (const ArchEntry& e : kArchitectures) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

}  // namespace deepinfer
