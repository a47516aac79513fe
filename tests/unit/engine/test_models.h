// Model files for the engine tests: the tiny golden models in the repository, and the real
// default model from the local cache (CI pulls it first; a test fails clearly without it).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/catalog.h"

namespace deepinfer::testing {

inline std::string tiny_model(const std::string& name) {
  return (std::filesystem::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / name).string();
}

// The default model's path, or "" after recording a failure that says how to get it.
inline std::string real_model() {
  const KnownModel* m = find_known_model(kDefaultModelName);
  const std::string path = m != nullptr ? cached_model_path(*m) : std::string();
  if (path.empty() || !std::filesystem::exists(path)) {
    ADD_FAILURE() << "model '" << kDefaultModelName << "' is not in the cache (" << model_cache_dir()
                  << "); run `deepinfer pull " << kDefaultModelName << "` first";
    return "";
  }
  return path;
}

}  // namespace deepinfer::testing
