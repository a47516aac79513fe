// safetensors layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {string: string}}
// then the data; offsets count from the first byte after the header. Tensors are used in place
// from the memory map, so every range is checked against the file before a view is made.
#include "model/loader/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/log.h"
#include "core/mapped_file.h"
#include "model/loader/block_scaled.h"
#include "model/loader/hf_config.h"

namespace deepinfer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The safetensors format caps the header at 100 MB; a larger length is corruption, and the
// cap keeps a hostile file from making the JSON parser allocate without bound.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// How a tensor of a block-scaled checkpoint takes part (block_scaled.h): codes waiting for their
// scales, or scales.
enum class BlockRole { kNone, kFp8Codes, kFp4Codes, kPackedBytes, kUe8m0Scales };

struct SafetensorsDType {
  std::string_view name;
  size_t element_bytes;  // F4: 0 (two elements per byte)
  std::optional<DType> dtype;  // nullopt: a valid safetensors dtype that is not a model weight here
  std::optional<DType> integer = std::nullopt;  // for the integer tables hf_integer_tensor_allowed names
  BlockRole block = BlockRole::kNone;
};

constexpr SafetensorsDType kDTypes[] = {
    {"F32", 4, DType::kF32},  {"F16", 2, DType::kF16},  {"BF16", 2, DType::kBF16},
    {"F64", 8, std::nullopt}, {"I64", 8, std::nullopt, DType::kI64}, {"I32", 4, std::nullopt, DType::kI32},
    {"I16", 2, std::nullopt}, {"I8", 1, std::nullopt, std::nullopt, BlockRole::kPackedBytes},
    {"U8", 1, std::nullopt, std::nullopt, BlockRole::kPackedBytes},
    {"U16", 2, std::nullopt}, {"U32", 4, std::nullopt}, {"U64", 8, std::nullopt},
    {"BOOL", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt, std::nullopt, BlockRole::kFp8Codes},
    {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt, std::nullopt, BlockRole::kUe8m0Scales},
    {"F4", 0, std::nullopt, std::nullopt, BlockRole::kFp4Codes},
};

// "<w>.scale" (DeepSeek's release) or "<w>.weight_scale_inv" (transformers' fp8) holds the block
// scales of "<w>.weight"; the weight's name, or "" for any other tensor.
std::string scaled_weight_name(std::string_view hf_name) {
  for (std::string_view suffix : {std::string_view(".weight_scale_inv"), std::string_view(".scale")}) {
    if (hf_name.size() > suffix.size() && hf_name.ends_with(suffix)) {
      return std::string(hf_name.substr(0, hf_name.size() - suffix.size())) + ".weight";
    }
  }
  return "";
}

const SafetensorsDType* find_dtype(std::string_view name) {
  for (const SafetensorsDType& d : kDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

Result<uint64_t> non_negative(const json& v, const std::string& file, const std::string& tensor, const char* field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return data_loss(file + ": tensor '" + tensor + "' has a " + field + " entry that is not a non-negative integer");
}

class SafetensorsSource final : public TensorSource {
 public:
  SafetensorsSource(std::string dir, const LoadOptions& options) : dir_(std::move(dir)), options_(options) {}

  const std::string& path() const override { return dir_; }
  const Metadata& metadata() const override { return metadata_; }
  const std::vector<TensorView>& tensors() const override { return tensors_; }

  Status load(const fs::path& config_path);

 private:
  Status load_single(const fs::path& file);
  Status load_sharded(const fs::path& index);
  // Maps one file and appends its tensors (renamed GGUF-style). `hf_names` receives the
  // Hugging Face names the file holds, for the index check.
  Status add_file(const fs::path& file, std::set<std::string>* hf_names);
  Status apply_tied_embeddings(const fs::path& config_path);
  // Appends a view under the tensor's GGUF-style name, refusing a name seen before.
  Status add_view(const std::string& hf_name, TensorView view);
  // Draft layers' tensors when the options leave them out (LoadOptions::draft_layers).
  bool left_out(const std::string& gguf_name) const {
    return !options_.draft_layers && is_draft_layer_tensor(architecture_, gguf_name);
  }
  // A tensor add_file held back: block-scaled codes, or a possible scale.
  struct Held {
    TensorView view;  // name: the Hugging Face name; dtype: plain tensors' only (dtype_name says the rest)
    BlockRole role = BlockRole::kNone;
    std::string dtype_name;
  };
  // Pairs block-scaled codes with their scales (held back by add_file, since a scale may sit in
  // another shard) and replaces each pair by one BF16 matrix.
  Status resolve_block_scaled();
  Status dequantize_pair(const Held& codes, const Held& scales);

  std::string dir_;
  LoadOptions options_;
  Metadata metadata_;
  std::string architecture_;
  std::vector<TensorView> tensors_;
  std::vector<MappedFile> files_;  // the views point into these maps
  std::vector<std::vector<uint16_t>> dequantized_;  // BF16 matrices made from block-scaled codes
  std::vector<std::vector<uint8_t>> repacked_;      // MXFP4 matrices made from FP4 codes
  std::map<std::string, Held, std::less<>> held_;    // by Hugging Face name
  std::map<std::string, std::string, std::less<>> origin_;  // GGUF name -> file, for duplicates
};

Status SafetensorsSource::load(const fs::path& config_path) {
  DI_ASSIGN_OR_RETURN(metadata_, read_hf_config(config_path.string()));
  const fs::path dir(dir_);
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    DI_RETURN_IF_ERROR(load_sharded(index));
  } else if (fs::exists(single, ec)) {
    DI_RETURN_IF_ERROR(load_single(single));
  } else {
    return not_found(dir_ + ": neither model.safetensors nor model.safetensors.index.json is present");
  }
  DI_RETURN_IF_ERROR(resolve_block_scaled());
  return apply_tied_embeddings(config_path);
}

Status SafetensorsSource::load_single(const fs::path& file) {
  std::set<std::string> names;
  return add_file(file, &names);
}

Status SafetensorsSource::load_sharded(const fs::path& index_path) {
  const std::string index_name = index_path.string();
  DI_ASSIGN_OR_RETURN(MappedFile index_file, MappedFile::open(index_name));
  const auto* text = reinterpret_cast<const char*>(index_file.data());
  const json index = json::parse(text ? text : "", (text ? text : "") + index_file.size(), nullptr,
                                 /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return data_loss(index_name + ": not a valid JSON object");
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object()) {
    return data_loss(index_name + ": 'weight_map' is missing or not an object");
  }
  if (map_it->empty()) return data_loss(index_name + ": 'weight_map' lists no tensors");

  // Shards in first-mention order, each opened once however many tensors it holds.
  std::vector<std::string> shard_order;
  std::map<std::string, std::set<std::string>> listed;  // shard -> tensors the index puts there
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) return data_loss(index_name + ": the shard of tensor '" + tensor + "' is not a string");
    const std::string s = shard.get<std::string>();
    // Shards live next to the index; a path elsewhere is not something the format produces.
    if (s.empty() || s.find('/') != std::string::npos || s.find('\\') != std::string::npos || s == "." || s == "..") {
      return invalid_argument(index_name + ": shard name '" + s + "' for tensor '" + tensor +
                              "' is not a plain file name");
    }
    if (!listed.count(s)) shard_order.push_back(s);
    listed[s].insert(tensor);
  }
  for (const std::string& shard : shard_order) {
    const fs::path shard_path = index_path.parent_path() / shard;
    std::error_code ec;
    if (!fs::exists(shard_path, ec)) {
      return not_found(index_name + ": shard '" + shard + "' (listed for tensor '" + *listed[shard].begin() +
                       "') does not exist");
    }
    std::set<std::string> held;
    DI_RETURN_IF_ERROR(add_file(shard_path, &held));
    for (const std::string& tensor : listed[shard]) {
      if (!held.count(tensor)) {
        return data_loss(index_name + ": tensor '" + tensor + "' is listed in shard '" + shard +
                         "', but that shard does not hold it");
      }
    }
  }
  metadata_.set("deepinfer.safetensors_shards", MetaValue::of_uint(shard_order.size(), MetaType::kU32));
  return {};
}

Status SafetensorsSource::add_file(const fs::path& path, std::set<std::string>* hf_names) {
  const std::string name = path.string();
  DI_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(name));
  const size_t size = file.size();
  if (size < 8) {
    return data_loss(name + ": file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file.data()[i];  // little-endian
  if (header_len > size - 8) {
    return data_loss(name + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes); the file is truncated or not safetensors");
  }
  if (header_len > kMaxHeaderBytes) {
    return data_loss(name + ": header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  const auto* header_begin = reinterpret_cast<const char*>(file.data() + 8);
  const json header = json::parse(header_begin, header_begin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return data_loss(name + ": header is not valid JSON");
  if (!header.is_object()) return data_loss(name + ": header is not a JSON object");

  // Decides the few tensor names whose meaning differs by architecture.
  Result<std::string> arch_name = metadata_.get_string_or("general.architecture", "");
  architecture_ = arch_name.ok() ? *arch_name : "";
  const std::string& architecture = architecture_;
  const uint8_t* data = file.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& item : header.items()) {
    const std::string& hf_name = item.key();  // a named local: clang 14 cannot capture a binding
    const nlohmann::json& info = item.value();
    if (hf_name == "__metadata__") continue;  // free-form strings ("format": "pt")
    auto problem = [&](const std::string& what) {
      return data_loss(name + ": tensor '" + hf_name + "' " + what);
    };
    if (!info.is_object()) return problem("is not described by a JSON object");
    auto dtype_it = info.find("dtype");
    auto shape_it = info.find("shape");
    auto offsets_it = info.find("data_offsets");
    if (dtype_it == info.end() || !dtype_it->is_string()) return problem("has no 'dtype' string");
    if (shape_it == info.end() || !shape_it->is_array()) return problem("has no 'shape' list");
    if (offsets_it == info.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return problem("has no 'data_offsets' pair [begin, end]");
    }
    const std::string dtype_name_str = dtype_it->get<std::string>();
    const SafetensorsDType* dt = find_dtype(dtype_name_str);
    if (!dt) return unimplemented(name + ": tensor '" + hf_name + "' has unknown dtype '" + dtype_name_str + "'");

    std::vector<int64_t> shape;
    uint64_t n_elements = 1;
    for (const json& d : *shape_it) {
      DI_ASSIGN_OR_RETURN(uint64_t dim, non_negative(d, name, hf_name, "shape"));
      if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(n_elements, dim, &n_elements)) {
        return problem("has a shape whose element count overflows");
      }
      shape.push_back(static_cast<int64_t>(dim));
    }
    DI_ASSIGN_OR_RETURN(uint64_t begin, non_negative((*offsets_it)[0], name, hf_name, "data_offsets"));
    DI_ASSIGN_OR_RETURN(uint64_t end, non_negative((*offsets_it)[1], name, hf_name, "data_offsets"));
    const std::string range = "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (end < begin) return problem("has data_offsets " + range + " that end before they begin");
    if (end > data_size) {
      return problem("has data_offsets " + range + " past the end of the data (" + std::to_string(data_size) +
                     " bytes); the file is truncated or corrupt");
    }
    std::string shape_s = "[";
    for (size_t i = 0; i < shape.size(); ++i) shape_s += (i ? ", " : "") + std::to_string(shape[i]);
    shape_s += "]";
    uint64_t want_bytes = 0;
    bool bytes_overflow = __builtin_mul_overflow(n_elements, static_cast<uint64_t>(dt->element_bytes), &want_bytes);
    if (dt->block == BlockRole::kFp4Codes) {
      // Two e2m1 codes a byte. Writers differ on whether the shape counts codes or bytes (torch's
      // float4_e2m1fn_x2 counts bytes), so either is read and the codes view keeps the byte shape.
      bytes_overflow = false;
      want_bytes = n_elements;
      if (end - begin != n_elements && !shape.empty() && shape.back() % 2 == 0) {
        want_bytes = n_elements / 2;
        shape.back() /= 2;
      }
    }
    if (bytes_overflow || want_bytes != end - begin) {
      const std::string needs = dt->block == BlockRole::kFp4Codes
                                    ? std::to_string(n_elements) + " (a byte a shape element) or " +
                                          std::to_string(n_elements / 2) + " (two codes a byte)"
                                    : want_bytes ? std::to_string(want_bytes) : std::string("more");
      return problem("has " + std::to_string(end - begin) + " bytes of data, but shape " + shape_s + " of " +
                     dtype_name_str + " needs " + needs);
    }

    hf_names->insert(hf_name);
    // Tensors the forward pass recomputes (rotary inv_freq) are dropped whatever their type.
    if (!hf_to_gguf_tensor_name(hf_name, architecture)) continue;
    const bool integer_table = dt->integer && hf_integer_tensor_allowed(hf_name, architecture);
    TensorView view;
    view.name = hf_name;
    view.dtype = integer_table ? *dt->integer : dt->dtype.value_or(DType::kF32);
    view.shape = std::move(shape);
    view.data = data + begin;
    view.n_bytes = static_cast<size_t>(end - begin);
    view.file = name;
    // Block-scaled codes, and anything that may be their scales, wait for resolve_block_scaled.
    const bool maybe_scale = dt->dtype && !scaled_weight_name(hf_name).empty();
    if ((dt->block != BlockRole::kNone && !integer_table) || maybe_scale) {
      if (held_.count(hf_name)) {
        return invalid_argument(name + ": tensor '" + hf_name + "' appears again (also in " +
                                held_.at(hf_name).view.file + ")");
      }
      held_.emplace(hf_name, Held{std::move(view), dt->block, dtype_name_str});
      continue;
    }
    if (!dt->dtype && !integer_table) {
      return unimplemented(name + ": tensor '" + hf_name + "' has dtype " + dtype_name_str +
                           "; only F32, F16 and BF16 weights (and block-scaled FP8 / FP4 with their scales) are "
                           "supported");
    }
    DI_RETURN_IF_ERROR(add_view(hf_name, std::move(view)));
  }
  files_.push_back(std::move(file));
  return {};
}

Status SafetensorsSource::add_view(const std::string& hf_name, TensorView view) {
  std::optional<std::string> gguf_name = hf_to_gguf_tensor_name(hf_name, architecture_);
  if (!gguf_name || left_out(*gguf_name)) return {};
  if (auto it = origin_.find(*gguf_name); it != origin_.end()) {
    return invalid_argument(view.file + ": tensor '" + hf_name + "' appears again (also in " + it->second + ")");
  }
  origin_.emplace(*gguf_name, view.file);
  view.name = std::move(*gguf_name);
  tensors_.push_back(std::move(view));
  return {};
}

Status SafetensorsSource::resolve_block_scaled() {
  // Each scale finds its codes; what is left over must be a plain tensor.
  std::set<std::string> paired;
  for (const auto& [hf_name, held] : held_) {
    if (held.role == BlockRole::kNone || held.role == BlockRole::kUe8m0Scales) continue;
    const std::string stem = hf_name.ends_with(".weight") ? hf_name.substr(0, hf_name.size() - 7) : "";
    const Held* scales = nullptr;
    for (const std::string& candidate : {stem + ".scale", stem + ".weight_scale_inv"}) {
      if (auto it = held_.find(candidate); !stem.empty() && it != held_.end()) {
        scales = &it->second;
        paired.insert(candidate);
        break;
      }
    }
    if (scales == nullptr) {
      return unimplemented(held.view.file + ": tensor '" + hf_name + "' has dtype " + held.dtype_name +
                           (stem.empty() ? "" : ", but no '" + stem + ".scale' or '" + stem +
                                                    ".weight_scale_inv' gives its block scales") +
                           "; F32, F16 and BF16 weights and block-scaled FP8 / FP4 are supported");
    }
    DI_RETURN_IF_ERROR(dequantize_pair(held, *scales));
    paired.insert(hf_name);
  }
  for (auto& [hf_name, held] : held_) {
    if (paired.count(hf_name)) continue;
    if (held.role != BlockRole::kNone) {
      const std::string weight = scaled_weight_name(hf_name);
      return invalid_argument(held.view.file + ": tensor '" + hf_name + "' has dtype " + held.dtype_name + ", " +
                              (weight.empty() ? std::string("which is only read as the block scales of a weight")
                                              : "but '" + weight + "' is not block-scaled FP8 or FP4 beside it"));
    }
    DI_RETURN_IF_ERROR(add_view(hf_name, std::move(held.view)));
  }
  held_.clear();
  if (!dequantized_.empty()) {
    size_t bytes = 0;
    for (const std::vector<uint16_t>& m : dequantized_) bytes += m.size() * sizeof(uint16_t);
    DI_LOG(kInfo, dir_ + ": " + std::to_string(dequantized_.size()) + " block-scaled FP8 / FP4 matrices dequantized to " +
                      "BF16 (" + std::to_string(bytes >> 20) + " MiB)");
    metadata_.set("deepinfer.dequantized_matrices", MetaValue::of_uint(dequantized_.size(), MetaType::kU32));
  }
  if (!repacked_.empty()) {
    size_t bytes = 0;
    for (const std::vector<uint8_t>& m : repacked_) bytes += m.size();
    DI_LOG(kInfo, dir_ + ": " + std::to_string(repacked_.size()) + " FP4 matrices kept as MXFP4 (" +
                      std::to_string(bytes >> 20) + " MiB)");
    metadata_.set("deepinfer.mxfp4_matrices", MetaValue::of_uint(repacked_.size(), MetaType::kU32));
  }
  return {};
}

Status SafetensorsSource::dequantize_pair(const Held& codes_held, const Held& scales_held) {
  const TensorView& codes = codes_held.view;
  const TensorView& scales = scales_held.view;
  const std::string what = codes.file + ": tensor '" + codes.name + "'";
  // A tensor no model binds is not multiplied out (DeepSeek V4's MTP layer unless asked for:
  // gigabytes of BF16 nothing reads).
  const std::optional<std::string> gguf_name = hf_to_gguf_tensor_name(codes.name, architecture_);
  if (!gguf_name || left_out(*gguf_name)) return {};
  if (codes.shape.size() != 2 || scales.shape.size() != 2) {
    return invalid_argument(what + " and its scales '" + scales.name + "' must both be matrices; they have shapes " +
                            codes.shape_string() + " and " + scales.shape_string());
  }
  if (codes.shape[0] == 0 || codes.shape[1] == 0 || scales.shape[0] == 0 || scales.shape[1] == 0) {
    return invalid_argument(what + " (" + codes.shape_string() + ") or its scales '" + scales.name + "' (" +
                            scales.shape_string() + ") is empty");
  }
  BlockScaledMatrix m;
  m.code = codes_held.role == BlockRole::kFp8Codes ? BlockCode::kFp8E4M3 : BlockCode::kFp4E2M1;
  if (m.code == BlockCode::kFp4E2M1 && codes.shape[1] > INT64_MAX / 2) {
    return invalid_argument(what + " has too many columns: " + codes.shape_string());
  }
  m.codes = codes.data;
  m.codes_bytes = codes.n_bytes;
  m.n_out = codes.shape[0];
  m.n_in = m.code == BlockCode::kFp4E2M1 ? 2 * codes.shape[1] : codes.shape[1];  // FP4: the byte shape
  m.scales = scales.data;
  m.scales_bytes = scales.n_bytes;
  m.scale_rows = scales.shape[0];
  m.scale_cols = scales.shape[1];
  // The scales' element type is the file's, read from its dtype string: a held tensor's view
  // has no model dtype of its own.
  const std::string& scale_dtype = scales_held.dtype_name;
  if (scale_dtype == "F8_E8M0") {
    m.scale_type = BlockScaleType::kUe8m0;
  } else if (scale_dtype == "F32") {
    m.scale_type = BlockScaleType::kF32;
  } else if (scale_dtype == "BF16") {
    m.scale_type = BlockScaleType::kBF16;
  } else {
    return unimplemented(codes.file + ": scales '" + scales.name + "' have dtype " + scale_dtype +
                         "; block scales must be F8_E8M0, F32 or BF16");
  }
  std::optional<BlockShape> block = infer_block(m.n_out, m.n_in, m.scale_rows, m.scale_cols);
  if (!block) {
    return invalid_argument(what + " is a [" + std::to_string(m.n_out) + ", " + std::to_string(m.n_in) +
                            "] matrix, but its scales '" + scales.name + "' have shape " + scales.shape_string() +
                            ", which no power-of-two block size gives");
  }
  m.block = *block;
  uint64_t n_values = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(m.n_out), static_cast<uint64_t>(m.n_in), &n_values) ||
      n_values > (uint64_t{1} << 40)) {
    return invalid_argument(what + " is too large to multiply out: " + codes.shape_string());
  }
  if (fits_mxfp4(m)) {
    // Kept as it is (17 bytes per 32 weights): the backends multiply MXFP4 natively.
    std::vector<uint8_t>& packed = repacked_.emplace_back(static_cast<size_t>(n_values / 32 * 17));
    DI_RETURN_IF_ERROR(repack_mxfp4(m, packed, codes.file + ": tensor '" + codes.name + "'"));
    TensorView view;
    view.dtype = DType::kMXFP4;
    view.shape = {m.n_out, m.n_in};
    view.data = packed.data();
    view.n_bytes = packed.size();
    view.file = codes.file;
    return add_view(codes.name, std::move(view));
  }
  std::vector<uint16_t>& out = dequantized_.emplace_back(static_cast<size_t>(n_values));
  DI_RETURN_IF_ERROR(dequantize_to_bf16(m, out, codes.file + ": tensor '" + codes.name + "'"));
  TensorView view;
  view.dtype = DType::kBF16;
  view.shape = {m.n_out, m.n_in};
  view.data = reinterpret_cast<const uint8_t*>(out.data());
  view.n_bytes = out.size() * sizeof(uint16_t);
  view.file = codes.file;
  return add_view(codes.name, std::move(view));
}

// transformers ties lm_head to the embedding after loading whenever the config says so, even
// if the checkpoint also stores an lm_head, so a stored one is dropped to compute the same
// thing; the forward pass ties when output.weight is absent.
Status SafetensorsSource::apply_tied_embeddings(const fs::path& config_path) {
  // DeepSeek V4 keeps its own tensor names and is never tied: its model binds head.weight.
  if (!metadata_.has("deepinfer.tied_embeddings")) return {};
  DI_ASSIGN_OR_RETURN(bool tied, metadata_.get_bool("deepinfer.tied_embeddings"));
  auto output = std::find_if(tensors_.begin(), tensors_.end(),
                             [](const TensorView& t) { return t.name == "output.weight"; });
  if (tied && output != tensors_.end()) {
    tensors_.erase(output);
  } else if (!tied && output == tensors_.end()) {
    return not_found(config_path.string() + ": tie_word_embeddings is false, but no safetensors file of '" + dir_ +
                     "' holds lm_head.weight");
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<TensorSource>> open_safetensors(const std::string& dir, const LoadOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": not a directory (a Hugging Face model directory was expected)");
  const fs::path config = fs::path(dir) / "config.json";
  if (!fs::exists(config, ec)) {
    return not_found(dir + ": config.json is missing (a Hugging Face model directory needs config.json and *.safetensors)");
  }
  auto source = std::make_unique<SafetensorsSource>(dir, options);
  DI_RETURN_IF_ERROR(source->load(config));
  return std::unique_ptr<TensorSource>(std::move(source));
}

}  // namespace deepinfer
