// TensorSource: what every model loader produces, whatever the file format.
//
// It owns the memory maps of its files and exposes each tensor as a read-only view in its
// stored type (quantized tensors stay quantized). Views stay valid as long as the source lives.
//
// Shapes are written outermost dimension first (PyTorch order): a linear layer's weight is
// [n_out, n_in] and each of its n_out rows is contiguous. GGUF lists dimensions innermost
// first (ne[0] = row length); the GGUF reader reverses them.
//
// Tensor names follow GGUF's convention ("token_embd.weight", "blk.3.attn_q.weight"); the
// safetensors loader renames Hugging Face names into it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "deepinfer/status.h"
#include "model/loader/metadata.h"

namespace deepinfer {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  std::string file;  // the file it came from, for error messages

  int64_t n_elements() const;
  int64_t dim(int i) const { return shape[static_cast<size_t>(i)]; }
  int64_t n_rows() const;        // product of all but the last dimension
  int64_t row_length() const { return shape.empty() ? 1 : shape.back(); }
  size_t row_bytes() const { return dtype_row_bytes(dtype, row_length()); }
  std::string shape_string() const;  // "[576, 49152]"
};

// A vocabulary's token classes (DeepSeek V4.1's Engram hashes n-grams of classes): per token
// id its class, and how many classes there are.
struct TokenClasses {
  std::vector<int32_t> of_token;
  int64_t count = 0;
};

struct LoadOptions {
  // The tensors of the draft layers a checkpoint carries (DeepSeek V4's mtp.*). Left out unless
  // asked for: only speculative decoding with them reads them, and FP8 / FP4 ones would be
  // multiplied out to BF16 (V4-Flash's MTP layer: about 13 GB).
  bool draft_layers = false;
  // The Engram token classes, which come from the tokenizer (a layer above the model): called
  // only by a model with Engram layers, which cannot load without them.
  std::function<Result<TokenClasses>()> token_classes;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;

  // What the source was opened with (open_tensor_source sets them).
  const LoadOptions& load_options() const { return load_options_; }
  void set_load_options(LoadOptions options) { load_options_ = std::move(options); }

  // The file or directory the source was opened from.
  virtual const std::string& path() const = 0;
  virtual const Metadata& metadata() const = 0;
  virtual const std::vector<TensorView>& tensors() const = 0;

  const TensorView* find(std::string_view name) const;
  // NOT_FOUND naming the tensor and the file when it is absent.
  Result<const TensorView*> get(std::string_view name) const;

 private:
  LoadOptions load_options_;
};

// Whether a tensor (by its loaded name) belongs to the draft layers LoadOptions::draft_layers
// controls: DeepSeek V4's mtp.*.
bool is_draft_layer_tensor(std::string_view architecture, std::string_view name);

// Opens a GGUF file, or a Hugging Face directory (config.json + *.safetensors), or a single
// .safetensors file whose directory holds config.json. Errors name the file and the problem.
Result<std::unique_ptr<TensorSource>> open_tensor_source(const std::string& path, const LoadOptions& options = {});

}  // namespace deepinfer
