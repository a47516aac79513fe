// GGUF parsing from bytes in memory, below open_gguf (gguf.h), which maps a file and calls it.
// Used directly by the fuzzer and the reader's tests. Never reads outside `bytes`, whatever
// they hold; every error is one Status naming `path` and the problem.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "model/loader/metadata.h"
#include "model/loader/tensor_source.h"

namespace deepinfer {

struct GgufContents {
  uint32_t version = 0;
  uint64_t alignment = 32;    // general.alignment, or the default
  uint64_t data_offset = 0;   // start of the tensor data section, from the start of the file
  Metadata metadata;
  std::vector<TensorView> tensors;  // in file order; data points into the parsed bytes
};

// Limits a valid file stays far below; they keep a hostile header from making the parser
// allocate or recurse without bound.
inline constexpr uint64_t kGgufMaxMetadataValues = uint64_t{1} << 24;  // array items included
inline constexpr int kGgufMaxArrayDepth = 8;
inline constexpr uint32_t kGgufMaxDims = 4;

// `path` is only used in messages. The tensor views of the result point into `bytes`, which
// must outlive them.
Result<GgufContents> parse_gguf(std::span<const uint8_t> bytes, const std::string& path);

}  // namespace deepinfer
