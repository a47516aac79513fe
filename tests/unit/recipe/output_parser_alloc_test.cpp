// The output parser is fed a token at a time for every streamed response, so feeding must not
// allocate once the parser has warmed up (its stage tables built, its buffers grown). This
// binary's operator new counts calls; the parser is fed in chunks of 1 to 64 characters and the
// count must not move over the measured part.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/output_parser.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

// Every form that pairs with the replaced deletes is replaced too: the library's own nothrow or
// array new paired with this free() is a mismatch the sanitizers (rightly) report.
namespace {
void* counted_malloc(std::size_t n) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* counted_malloc_or_throw(std::size_t n) {
  if (void* p = counted_malloc(n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return counted_malloc_or_throw(n); }
void* operator new[](std::size_t n) { return counted_malloc_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace deepinfer::recipe {
namespace {

// `text` in pieces of `n` bytes (the parser takes any cut, even inside a UTF-8 character).
std::vector<std::string_view> pieces(std::string_view text, size_t n) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size(); i += n) out.push_back(text.substr(i, n));
  return out;
}

// Allocations made while feeding `measured` after `warm_up`, in chunks of `n` bytes.
int64_t allocations_feeding(const ParsingOptions& o, const std::string& warm_up,
                            const std::string& measured, size_t n) {
  OutputParser parser(o);
  size_t events = 0;
  for (std::string_view c : pieces(warm_up, n)) events += parser.feed(c).size();
  const std::vector<std::string_view> chunks = pieces(measured, n);
  const int64_t before = g_allocations.load();
  for (std::string_view c : chunks) events += parser.feed(c).size();
  const int64_t made = g_allocations.load() - before;
  EXPECT_GT(events, 0u);
  return made;
}

std::string repeat(std::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(OutputParserAllocations, ReasoningAndAnswerTextInSmallChunks) {
  ParsingOptions o;
  o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;
  o.stop_sequences = {"<STOP>"};
  // Plain runs, and bytes that may start a marker ('<', newlines) without finishing one.
  const std::string reasoning = repeat("plan: a < b, 日本 \"q\"\n\nnext <｜DSM step\n", 200);
  const std::string answer = repeat("The answer <is> here 😀 back\\slash\n<STO and on. ", 200);
  for (size_t n : {1, 2, 4, 16, 64}) {
    EXPECT_EQ(allocations_feeding(o, reasoning, reasoning, n), 0) << "reasoning, chunks of " << n;
    EXPECT_EQ(allocations_feeding(o, reasoning + "</think>" + answer, answer, n), 0)
        << "answer, chunks of " << n;
  }
}

TEST(OutputParserAllocations, DsmlCallsInSmallChunks) {
  ParsingOptions o;
  const std::string invoke =
      "<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Paris \"centre\"\n日本</｜DSML｜"
      "parameter>\n<｜DSML｜parameter name=\"opts\" string=\"false\">{\"a\": [1, 2.5]}</｜DSML｜"
      "parameter>\n</｜DSML｜invoke>\n";
  // The first call builds the stage tables; the calls after it are measured.
  const std::string warm_up = "Checking.\n\n<｜DSML｜tool_calls>\n" + invoke;
  for (size_t n : {1, 4, 16}) {
    EXPECT_EQ(allocations_feeding(o, warm_up, repeat(invoke, 20), n), 0) << "chunks of " << n;
  }
}

}  // namespace
}  // namespace deepinfer::recipe
