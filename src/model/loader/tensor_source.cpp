#include "model/loader/tensor_source.h"

#include <filesystem>

#include "model/loader/gguf.h"
#include "model/loader/safetensors.h"

namespace deepinfer {

int64_t TensorView::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorView::n_rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const TensorView* TensorSource::find(std::string_view name) const {
  for (const TensorView& t : tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<const TensorView*> TensorSource::get(std::string_view name) const {
  if (const TensorView* t = find(name)) return t;
  return not_found("tensor '" + std::string(name) + "' is missing from '" + path() + "'");
}

bool is_draft_layer_tensor(std::string_view architecture, std::string_view name) {
  return (architecture == "deepseek_v4" || architecture == "deepseek_v41") && name.starts_with("mtp.");
}

Result<std::unique_ptr<TensorSource>> open_tensor_source(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("model path '" + path + "' does not exist");
  Result<std::unique_ptr<TensorSource>> source = [&]() -> Result<std::unique_ptr<TensorSource>> {
    if (fs::is_directory(path, ec)) return open_safetensors(path, options);
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".safetensors" || fs::path(path).filename() == "config.json") {
      return open_safetensors(fs::path(path).parent_path().string(), options);
    }
    return open_gguf(path);
  }();
  if (source.ok()) (*source)->set_load_options(options);
  return source;
}

}  // namespace deepinfer
