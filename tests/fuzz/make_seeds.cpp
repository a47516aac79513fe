// Writes the fuzzer's seed corpus (tests/fuzz/corpus/*.gguf) with the tests' GGUF writer:
// small valid files covering every metadata type, both versions, custom alignment and a
// tensor of every block format. Usage: gguf_fuzz_seeds DIR
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "gguf_test_writer.h"

namespace {

using namespace deepinfer::testing;

void save(const std::string& dir, const std::string& name, GgufWriter w) {
  const auto bytes = w.bytes();
  std::ofstream(dir + "/" + name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::printf("%s/%s: %zu bytes\n", dir.c_str(), name.c_str(), bytes.size());
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::mt19937 rng(42);

  save(dir, "sample.gguf", sample_gguf_writer());
  save(dir, "empty_v2.gguf", GgufWriter(2));

  GgufWriter aligned;
  aligned.alignment(64).kv("general.architecture", gguf_string("gemma3"));
  aligned.tensor({"a", {5, 3}, 1, random_bytes(30, rng), std::nullopt});
  aligned.tensor({"b", {7}, 30, random_bytes(14, rng), std::nullopt});
  save(dir, "aligned64.gguf", aligned);

  // One row of each 32-element format and a 256-element row of each k-quant (ids and block
  // bytes as in core/dtype.cpp).
  struct Format {
    const char* name;
    uint32_t id;
    uint64_t block, bytes;
  };
  const Format formats[] = {{"q4_0", 2, 32, 18},    {"q4_1", 3, 32, 20},   {"q5_0", 6, 32, 22},
                            {"q5_1", 7, 32, 24},    {"q8_0", 8, 32, 34},   {"q8_1", 9, 32, 36},
                            {"q2_K", 10, 256, 84},  {"q3_K", 11, 256, 110}, {"q4_K", 12, 256, 144},
                            {"q5_K", 13, 256, 176}, {"q6_K", 14, 256, 210}, {"q8_K", 15, 256, 292}};
  for (const Format& f : formats) {
    GgufWriter w;
    w.kv("general.architecture", gguf_string("llama"));
    const uint64_t rows = 2;
    w.tensor({std::string("blk.0.") + f.name + ".weight", {f.block * 2, rows}, f.id,
              random_bytes(2 * rows * f.bytes, rng), std::nullopt});
    save(dir, std::string("tensor_") + f.name + ".gguf", w);
  }

  GgufWriter vocab;
  vocab.kv("tokenizer.ggml.model", gguf_string("gpt2"))
      .kv("tokenizer.ggml.tokens", gguf_array(GgufType::kString, {gguf_string("<s>"), gguf_string("a"), gguf_string("b")}))
      .kv("tokenizer.ggml.scores", gguf_array(GgufType::kF32, {gguf_f32(0), gguf_f32(-1), gguf_f32(-2)}))
      .kv("tokenizer.ggml.token_type", gguf_array(GgufType::kI32, {gguf_i32(3), gguf_i32(1), gguf_i32(1)}))
      .kv("tokenizer.ggml.merges", gguf_array(GgufType::kString, {gguf_string("a b")}));
  save(dir, "vocab.gguf", vocab);
  return 0;
}
