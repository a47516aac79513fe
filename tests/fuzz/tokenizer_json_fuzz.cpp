// libFuzzer target of tokenizer.json loading (Tokenizer::from_tokenizer_json): the input is a
// Hugging Face tokenizer.json. Loading gives a Status with a message, or a tokenizer that then
// encodes a few fixed texts and the input's own first bytes (which hold its vocabulary's
// spellings), plain and with special tokens parsed, and through encode_segments, and decodes
// what it encoded and its first tokens one by one, with the checks of tokenizer_checks.h: ids
// inside the vocabulary, valid UTF-8, incremental decoding equal to decode. Built and run by
// scripts/fuzz.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer_checks.h"

namespace {

using deepinfer::EncodeOptions;
using deepinfer::Segment;
using deepinfer::Tokenizer;

constexpr size_t kInputAsText = 256;    // bytes of the input also encoded as text
constexpr int32_t kDecodedAlone = 64;   // tokens decoded one by one

constexpr std::string_view kTexts[] = {
    "Hello world, it's 3:45pm!\n\tcode() { return 0; }  ",
    "héllo wörld 日本語 👋🏽 e\u0301 \u00a0",
    "<|im_start|>user\nhi<|im_end|><s></s><unk> [INST] <0x0A>",
    "ok \xff\xfe \xc3 end",
};

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "tokenizer_json_fuzz: %s (text of %zu bytes)\n", what, text.size());
  std::abort();
}

void check(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, std::string_view text) {
  if (const char* problem = deepinfer::fuzz::ids_problem(tokenizer, ids)) fail(problem, text);
  if (const char* problem = deepinfer::fuzz::decoding_problem(tokenizer, ids)) fail(problem, text);
}

void exercise(const Tokenizer& tokenizer, std::string_view text) {
  check(tokenizer, tokenizer.encode(text, EncodeOptions{}), text);
  EncodeOptions trusted;
  trusted.parse_special = true;
  trusted.add_bos = true;
  check(tokenizer, tokenizer.encode(text, trusted), text);
  const Segment segments[] = {Segment::of_text(text), Segment::of_token(0), Segment::of_text(text)};
  auto ids = tokenizer.encode_segments(segments, {});
  if (!ids.ok()) fail("encode_segments rejected valid segments", text);
  check(tokenizer, *ids, text);
}

const std::string& path() {
  static const std::string p = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "tokenizer_json_fuzz.XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) fail("mkstemp failed", pattern);
    ::close(fd);
    return pattern;
  }();
  static const bool cleanup = std::atexit([] { ::unlink(p.c_str()); }) == 0;
  (void)cleanup;
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(path(), std::ios::binary | std::ios::trunc);
    out.write(input.data(), static_cast<std::streamsize>(input.size()));
  }
  auto loaded = Tokenizer::from_tokenizer_json(path());
  if (!loaded.ok()) {
    if (loaded.status().message().empty()) fail("an error without a message", input);
    return 0;
  }
  const Tokenizer& tokenizer = **loaded;
  if (tokenizer.n_vocab() <= 0) fail("a loaded tokenizer with no vocabulary", input);
  for (std::string_view text : kTexts) exercise(tokenizer, text);
  exercise(tokenizer, input.substr(0, kInputAsText));
  std::vector<int32_t> first;
  for (int32_t id = 0; id < std::min<int64_t>(tokenizer.n_vocab(), kDecodedAlone); ++id) {
    first.push_back(id);
    check(tokenizer, {id}, "a token alone");
  }
  check(tokenizer, first, "the first tokens");
  return 0;
}
