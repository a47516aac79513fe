// libFuzzer target of the tokenizers: any bytes, as text, through encode (plain and trusted),
// encode_segments, encode_parallel, decode and IncrementalDecoder, on the SmolLM2 GGUF
// vocabulary (byte-level BPE), Gemma 3's (SentencePiece with byte fallback), the DeepSeek V4
// tokenizer.json and the committed tokenizer.json fixtures. Checks, beyond "no crash":
//   - every id is inside the vocabulary and decode gives valid UTF-8;
//   - pushing the ids one by one through an IncrementalDecoder gives exactly decode(ids);
//   - encode_parallel equals encode;
//   - encode_segments never yields a control token the caller did not put there by id (beyond
//     what untrusted encoding of the same text gives), equals untrusted encode for one text
//     segment, and rejects an id outside the vocabulary;
//   - decode(encode(text)) == text for valid UTF-8 on the lossless byte-level tokenizers, less
//     the bytes the vocabulary lacks, which are dropped as llama.cpp and transformers drop them
//     (SmolLM2 has no token for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, nor for some lead bytes
//     such as 0xf1). Dropping a lead byte leaves its continuation bytes, which decode shows as
//     U+FFFD, so the expectation is sanitize(text less those bytes).
// The models come from the cache (${XDG_CACHE_HOME:-~/.cache}/deepinfer/models, as
// src/model/catalog.h finds it); a missing one is skipped with a note on stderr, and the
// committed fixtures are always fuzzed. Built and run by scripts/fuzz.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/thread_pool.h"
#include "model/catalog.h"
#include "model/loader/gguf.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_checks.h"

namespace {

using deepinfer::EncodeOptions;
using deepinfer::Segment;
using deepinfer::Tokenizer;

struct Subject {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
  bool lossless = false;  // decode(encode(valid UTF-8)) must give the text back...
  std::string missing_bytes;  // ...without these bytes, which have no byte-level symbol
};

struct State {
  std::vector<Subject> subjects;
  std::unique_ptr<deepinfer::ThreadPool> pool;
};

[[noreturn]] void fail(const Subject& s, const char* what, std::string_view text) {
  std::fprintf(stderr, "tokenizer_fuzz: %s: %s (input of %zu bytes)\n", s.name.c_str(), what, text.size());
  std::abort();
}

void add(State& state, std::string name, deepinfer::Result<std::unique_ptr<Tokenizer>> loaded, bool lossless) {
  if (!loaded.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: skipping %s: %s\n", name.c_str(), loaded.status().to_string().c_str());
    return;
  }
  Subject subject{std::move(name), std::move(loaded).value(), lossless, {}};
  for (int byte = 0; lossless && byte < 0x100; ++byte) {
    const auto symbol = deepinfer::byte_level::char_of_byte(static_cast<uint8_t>(byte));
    if (!subject.tokenizer->find_token(symbol)) subject.missing_bytes += static_cast<char>(byte);
  }
  state.subjects.push_back(std::move(subject));
}

std::string without(std::string_view text, std::string_view bytes) {
  std::string kept;
  for (char c : text) {
    if (bytes.find(c) == std::string_view::npos) kept += c;
  }
  return kept;
}

deepinfer::Result<std::unique_ptr<Tokenizer>> from_gguf(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return deepinfer::not_found(path.string() + " is missing");
  DI_ASSIGN_OR_RETURN(auto source, deepinfer::open_gguf(path.string()));
  return Tokenizer::from_metadata(source->metadata());
}

State load() {
  State state;
  const std::filesystem::path cache = deepinfer::model_cache_dir();
  add(state, "SmolLM2 GGUF", from_gguf(cache / "SmolLM2-135M-Instruct.Q4_1.gguf"), /*lossless=*/true);
  add(state, "Gemma 3 GGUF", from_gguf(cache / "gemma-3-270m-q4_k_m.gguf"), /*lossless=*/false);
  const std::filesystem::path deepseek = cache / "deepseek-v4-tokenizer";
  add(state, "DeepSeek V4 tokenizer.json",
      std::filesystem::exists(deepseek) ? Tokenizer::from_hf_dir(deepseek.string())
                                        : deepinfer::not_found(deepseek.string() + " is missing"),
      /*lossless=*/true);
  const std::filesystem::path fixtures = std::filesystem::path(DEEPINFER_TEST_DATA) / "golden/tokenizer/hf_fixtures";
  for (const char* name : {"fixture_bytelevel_added", "fixture_spm_fallback", "fixture_metaspace", "fixture_affixes"}) {
    add(state, name, Tokenizer::from_tokenizer_json((fixtures / name / "tokenizer.json").string()), /*lossless=*/false);
  }
  if (state.subjects.empty()) {
    std::fprintf(stderr, "tokenizer_fuzz: no tokenizer could be loaded\n");
    std::abort();
  }
  state.pool = std::make_unique<deepinfer::ThreadPool>(2);
  return state;
}

void check_ids(const Subject& s, const std::vector<int32_t>& ids, std::string_view text) {
  if (const char* problem = deepinfer::fuzz::ids_problem(*s.tokenizer, ids)) fail(s, problem, text);
}

void check_decoding(const Subject& s, const std::vector<int32_t>& ids, std::string_view text) {
  if (const char* problem = deepinfer::fuzz::decoding_problem(*s.tokenizer, ids)) fail(s, problem, text);
}

// Text segments split at 0x01 bytes; after each split, a token segment whose id comes from
// the next byte. A text segment encodes as untrusted text: the result may hold a control id
// only where a token segment put it, or where untrusted encoding of that text gives it too
// (an unknown-token id for a character the vocabulary lacks).
void check_segments(const Subject& s, std::string_view text) {
  const Tokenizer& tok = *s.tokenizer;
  std::vector<Segment> segments;
  std::unordered_set<int32_t> allowed;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\x01') continue;
    const std::string_view piece = text.substr(begin, i - begin);
    segments.push_back(Segment::of_text(piece));
    for (int32_t id : tok.encode(piece, EncodeOptions{})) allowed.insert(id);
    if (i + 1 < text.size()) {
      const auto id = static_cast<int32_t>((static_cast<uint8_t>(text[i + 1]) * 7919u + i) %
                                           static_cast<uint64_t>(tok.n_vocab()));
      segments.push_back(Segment::of_token(id));
      allowed.insert(id);
    }
    begin = i + 1;
  }
  auto ids = tok.encode_segments(segments, {});
  if (!ids.ok()) fail(s, "encode_segments rejected valid segments", text);
  check_ids(s, *ids, text);
  for (int32_t id : *ids) {
    if (tok.is_control(id) && !allowed.contains(id)) fail(s, "a control token came out of text", text);
  }
  check_decoding(s, *ids, text);
  const Segment whole = Segment::of_text(text);
  auto single = tok.encode_segments(std::span(&whole, 1), {});
  if (!single.ok() || *single != tok.encode(text, EncodeOptions{})) {
    fail(s, "one text segment differs from untrusted encode", text);
  }
  segments.push_back(Segment::of_token(static_cast<int32_t>(tok.n_vocab())));
  if (tok.encode_segments(segments, {}).ok()) fail(s, "encode_segments accepted an id outside the vocabulary", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const State state = load();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid_utf8 = deepinfer::utf8::sanitize(text) == text;
  // encode_parallel only cuts text of 32 KiB and more: one input in 32 is repeated to that
  // length (two full encodes per tokenizer that cuts at all) so that the cuts are fuzzed too.
  std::string long_text;
  if (size >= 16 && data[0] % 32 == 0) {
    while (long_text.size() < 34 * 1024) long_text.append(text);
  }
  for (const Subject& s : state.subjects) {
    const std::vector<int32_t> plain = s.tokenizer->encode(text, EncodeOptions{});
    check_ids(s, plain, text);
    check_decoding(s, plain, text);
    if (s.lossless && valid_utf8 &&
        s.tokenizer->decode(plain) != deepinfer::utf8::sanitize(without(text, s.missing_bytes))) {
      fail(s, "decode(encode(text)) != text less the bytes the vocabulary lacks", text);
    }

    EncodeOptions trusted;
    trusted.parse_special = true;
    trusted.add_bos = true;
    const std::vector<int32_t> special = s.tokenizer->encode(text, trusted);
    check_ids(s, special, text);
    check_decoding(s, special, text);
    if (!long_text.empty() && s.tokenizer->can_encode_in_parallel() &&
        s.tokenizer->encode_parallel(long_text, EncodeOptions{}, *state.pool) != s.tokenizer->encode(long_text, EncodeOptions{})) {
      fail(s, "encode_parallel differs from encode", long_text);
    }
    check_segments(s, text);
  }
  return 0;
}
