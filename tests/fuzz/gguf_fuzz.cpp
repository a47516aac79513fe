// libFuzzer target of the GGUF reader: any bytes either parse or give one Status naming the
// file. When they parse, every byte of every tensor view is read and the first row of each
// tensor of a supported type is dequantized and dotted, so a view reaching past the input is
// an AddressSanitizer report. Built and run by scripts/fuzz.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"
#include "model/loader/ds4_gguf.h"
#include "model/loader/gguf_parse.h"

namespace {

const std::string kPath = "fuzz.gguf";

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "gguf_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void exercise_tensor(const deepinfer::TensorView& t, std::span<const uint8_t> bytes) {
  using namespace deepinfer;
  if (t.data < bytes.data() || t.n_bytes > bytes.size() ||
      t.data + t.n_bytes > bytes.data() + bytes.size()) {
    fail("tensor view outside the input", t.name);
  }
  // Volatile: the reads must happen, each one checked by ASan.
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < t.n_bytes; ++i) sink = sink ^ t.data[i];

  const int64_t n = t.row_length();
  if (t.n_bytes == 0 || n == 0 || cpu::ref::dequantize_row_fn(t.dtype) == nullptr) return;
  if (t.row_bytes() > t.n_bytes) fail("first row longer than the tensor", t.name);
  std::vector<float> row(static_cast<size_t>(n));
  cpu::dequantize_row(t.dtype, t.data, row.data(), n);
  if (!cpu::quant_supported(t.dtype)) return;
  // A fixed, finite activation: the weights are the fuzzed side.
  const DType act_type = cpu::vec_dot_type(t.dtype);
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  std::vector<uint8_t> act(dtype_row_bytes(act_type, n));
  cpu::quantize_row(act_type, ones.data(), act.data(), n);
  volatile float dot = cpu::vec_dot(t.dtype, t.data, act.data(), n);
  (void)dot;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes from operator new (16-aligned): real files come from
  // page-aligned memory maps and the reader's alignment rule relies on that; libFuzzer's own
  // buffer has no such alignment. ASan still sees the exact end of the input.
  const std::vector<uint8_t> storage(data, data + size);
  const std::span<const uint8_t> bytes(storage.data(), size);
  auto parsed = deepinfer::parse_gguf(bytes, kPath);
  if (!parsed.ok()) {
    if (parsed.status().message().rfind(kPath + ": ", 0) != 0) fail("error without the file name", parsed.status().message());
  } else {
    for (const deepinfer::TensorView& t : parsed->tensors) exercise_tensor(t, bytes);
    // antirez/ds4's DeepSeek V4 layout is rewritten on open (ds4_gguf.h): its per-expert views
    // of stacked tensors must stay inside the input too.
    auto arch = parsed->metadata.get_string_or("general.architecture", "");
    if (arch.ok() && *arch == deepinfer::kDs4Architecture) {
      const deepinfer::Status adapted = deepinfer::adapt_ds4_gguf(*parsed, kPath);
      if (!adapted.ok()) {
        if (adapted.message().rfind(kPath + ": ", 0) != 0) fail("ds4 error without the file name", adapted.message());
      } else {
        for (const deepinfer::TensorView& t : parsed->tensors) exercise_tensor(t, bytes);
      }
    }
  }
  return 0;
}
