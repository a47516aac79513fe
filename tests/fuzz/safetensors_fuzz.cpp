// libFuzzer target of the safetensors loader (src/model/loader/safetensors.h): the input
// becomes the files of a Hugging Face model directory, which open_safetensors then loads. The
// first byte picks the layout (bits 0-1) and, where config.json is not fuzzed, which committed
// tiny model's config.json to use (bits 2-3: tests/golden/tiny/*/config.json); the rest is
// split at its first NUL byte (JSON holds none), the parts going to:
//   layout 0, 3  model.safetensors
//   layout 1     model.safetensors.index.json, then one shard written under both shard names
//                the seeds use (a.safetensors, b.safetensors)
//   layout 2     config.json, then model.safetensors
// A load is a Status or a source whose every tensor is backed by exactly the bytes its header
// entry names: the target parses each header itself, maps names as the loader does
// (hf_to_gguf_tensor_name) and compares each view's bytes with that range of the input, so a
// view outside its range or outside the file fails here (reading outside the map faults).
// Each view's byte count must also equal its shape times its element size. A block-scaled
// weight (F8_E4M3, F4, I8 / U8 codes with their scales) is the exception: the loader multiplies it
// out into BF16 memory of its own (or repacks FP4 on blocks of 32 as MXFP4), so its view must hold
// an n_out x n_in matrix of that type outside the file, every byte readable. Built and run by
// scripts/fuzz.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/loader/hf_config.h"
#include "model/loader/safetensors.h"

namespace {

namespace fs = std::filesystem;
using deepinfer::TensorView;

constexpr const char* kConfigs[] = {"llama_gqa_tied", "llama_mha_untied", "gemma3_sliding", "qwen3_moe_unnormalized"};
constexpr const char* kShardNames[] = {"a.safetensors", "b.safetensors"};

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "safetensors_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read a committed config", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) fail("cannot write", path.string());
}

struct State {
  fs::path dir;  // the model directory, rewritten for every input
  std::string configs[4];
};

State& state() {
  static State s = [] {
    State st;
    std::string pattern = (fs::temp_directory_path() / "safetensors_fuzz.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) fail("mkdtemp failed", pattern);
    st.dir = pattern;
    const fs::path tiny = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny";
    for (int i = 0; i < 4; ++i) st.configs[i] = read_file(tiny / kConfigs[i] / "config.json");
    return st;
  }();
  static const bool cleanup = std::atexit([] {
    std::error_code ec;
    fs::remove_all(s.dir, ec);
  }) == 0;
  (void)cleanup;
  return s;
}

// Byte ranges [begin, end) of the data each tensor's header entry names, by GGUF name, parsed
// here independently of the loader; nullopt when the header is not what a loaded file can
// have (the loader accepted it, so that is a failure at the caller).
struct Entry {
  uint64_t begin = 0, end = 0;
  std::string dtype;
};
using Ranges = std::multimap<std::string, Entry>;

bool block_scaled_codes(const std::string& dtype) {
  return dtype == "F8_E4M3" || dtype == "F4" || dtype == "I8" || dtype == "U8";
}

std::optional<Ranges> header_ranges(std::string_view file, std::string_view architecture) {
  if (file.size() < 8) return std::nullopt;
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  if (header_len > file.size() - 8) return std::nullopt;
  const auto header = nlohmann::json::parse(file.substr(8, header_len), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return std::nullopt;
  Ranges ranges;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") continue;
    const auto& offsets = item.value().at("data_offsets");
    const auto name = deepinfer::hf_to_gguf_tensor_name(item.key(), architecture);
    if (!name) continue;
    const uint64_t data_begin = 8 + header_len;
    ranges.emplace(*name, Entry{data_begin + offsets[0].get<uint64_t>(), data_begin + offsets[1].get<uint64_t>(),
                                item.value().at("dtype").get<std::string>()});
  }
  return ranges;
}

void check_view(const TensorView& view, std::string_view file, const Ranges& ranges) {
  const auto [first, last] = ranges.equal_range(view.name);
  if (first == last) fail("a tensor no header entry names", view.name);
  if (std::next(first) != last) fail("two header entries for one tensor were both accepted", view.name);
  const auto& [begin, end, dtype] = first->second;
  if (begin > end || end > file.size()) fail("a view outside the file was accepted", view.name);
  if (block_scaled_codes(dtype)) {
    if ((view.dtype != deepinfer::DType::kBF16 && view.dtype != deepinfer::DType::kMXFP4) || view.shape.size() != 2) {
      fail("block-scaled codes loaded as something other than a BF16 or MXFP4 matrix", view.name);
    }
    if (view.n_bytes != deepinfer::dtype_row_bytes(view.dtype, view.n_elements())) {
      fail("a dequantized view of the wrong size", view.name);
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < view.n_bytes; ++i) sink = sink ^ view.data[i];
    return;
  }
  if (view.n_bytes != end - begin) fail("a view's size is not its data_offsets range", view.name);
  if (view.n_bytes != deepinfer::dtype_row_bytes(view.dtype, view.n_elements())) {
    fail("a view's size is not its shape times its element size", view.name + " " + view.shape_string());
  }
  if (view.n_bytes > 0 && std::memcmp(view.data, file.data() + begin, view.n_bytes) != 0) {
    fail("a view's bytes are not the ones its data_offsets name", view.name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  State& st = state();
  if (size < 1) return 0;
  const unsigned layout = data[0] & 3;
  const std::string& fixed_config = st.configs[(data[0] >> 2) & 3];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view head = rest.substr(0, nul);
  const std::string_view tail = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);

  std::error_code ec;
  fs::remove_all(st.dir, ec);
  fs::create_directory(st.dir);
  std::string_view weights;  // the bytes of every .safetensors file written
  if (layout == 1) {
    write_file(st.dir / "config.json", fixed_config);
    write_file(st.dir / "model.safetensors.index.json", head);
    weights = tail;
    for (const char* shard : kShardNames) write_file(st.dir / shard, weights);
  } else if (layout == 2) {
    write_file(st.dir / "config.json", head);
    weights = tail;
    write_file(st.dir / "model.safetensors", weights);
  } else {
    write_file(st.dir / "config.json", fixed_config);
    weights = rest;
    write_file(st.dir / "model.safetensors", weights);
  }

  auto source = deepinfer::open_safetensors(st.dir.string());
  if (!source.ok()) {
    if (source.status().message().empty()) fail("an error without a message", source.status().to_string());
    return 0;
  }
  const auto architecture = (*source)->metadata().get_string_or("general.architecture", "");
  if (!architecture.ok()) fail("a loaded source without an architecture", architecture.status().to_string());
  const auto ranges = header_ranges(weights, *architecture);
  if (!ranges) fail("a file that is not safetensors was loaded", std::to_string(weights.size()) + " bytes");
  for (const TensorView& view : (*source)->tensors()) check_view(view, weights, *ranges);
  return 0;
}
