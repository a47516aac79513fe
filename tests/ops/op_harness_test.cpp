// The op harness (backend/op_harness.h): every case of the table on every backend of the build
// ("cpu" today) against "cpu-reference", one test per backend and case. CI runs the CI-sized
// table; DEEPINFER_OPS_FULL=1 adds the larger shapes and sweeps (about 900 cases, seconds here).
// DEEPINFER_OPS_VERBOSE=1 prints each numeric output's measured error, for choosing tolerances.
// The table must cover every op of the Queue and every weight format the CPU multiplies,
// packed and unpacked: a new op or format that skips it fails OpHarnessTable.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/op_harness.h"
#include "core/thread_pool.h"

namespace deepinfer::backend::harness {
namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

const std::vector<OpCase>& table() {
  static const std::vector<OpCase> cases = op_cases(env_set("DEEPINFER_OPS_FULL") ? CaseSet::kFull : CaseSet::kCi);
  return cases;
}

// Every backend this build has, except the oracle itself: a new backend joins by being listed
// in available_backends().
std::vector<std::string> backends_under_test() {
  std::vector<std::string> names;
  for (const std::string& b : available_backends()) {
    if (b != "cpu-reference") names.push_back(b);
  }
  return names;
}

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

// nullptr (and the reason in *why) when the backend cannot be created on this machine.
Backend* backend(const std::string& name, std::string* why = nullptr) {
  static std::map<std::string, Result<std::unique_ptr<Backend>>> made;
  auto it = made.find(name);
  if (it == made.end()) it = made.emplace(name, create_backend(name, {&pool()})).first;
  if (!it->second.ok()) {
    if (why) *why = it->second.status().to_string();
    return nullptr;
  }
  return it->second->get();
}

using Param = std::tuple<std::string, size_t>;  // backend, case
class OpHarness : public ::testing::TestWithParam<Param> {};

TEST_P(OpHarness, MatchesTheReference) {
  const auto& [name, index] = GetParam();
  const OpCase& c = table()[index];
  std::string why;
  Backend* b = backend(name, &why);
  if (b == nullptr) GTEST_SKIP() << "no " << name << " backend here: " << why;
  const CaseResult r = check_case(c, *b, *backend("cpu-reference"));
  if (env_set("DEEPINFER_OPS_VERBOSE")) {
    for (const OutputError& e : r.errors) {
      std::printf("%-60s %-10s nmse %.3g max_err %.3g\n", c.label().c_str(), e.name.c_str(), e.nmse, e.max_err);
    }
  }
  if (r.verdict == Verdict::kSkip) GTEST_SKIP() << c.label() << ": " << r.message;
  EXPECT_EQ(r.verdict, Verdict::kPass) << name << ": " << c.label() << ": " << failure_name(r.failure) << ": "
                                       << r.message;
}

std::string test_name(const ::testing::TestParamInfo<Param>& info) {
  const std::string s = std::get<0>(info.param) + " " + table()[std::get<1>(info.param)].label();
  std::string out;
  for (char ch : s) {
    if (std::isalnum(static_cast<unsigned char>(ch)) != 0) {
      out += ch;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

INSTANTIATE_TEST_SUITE_P(Table, OpHarness,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()),
                                            ::testing::Range<size_t>(0, table().size())),
                         test_name);

TEST(OpHarnessTable, LabelsAreUnique) {
  std::set<std::string> seen;
  for (const OpCase& c : table()) EXPECT_TRUE(seen.insert(c.label()).second) << "two cases named " << c.label();
}

// Every op of backend.h's table has a case (ops are numbered from 0; op_name knows them all).
TEST(OpHarnessTable, EveryOpHasACase) {
  std::set<Op> covered;
  for (const OpCase& c : table()) {
    covered.insert(c.op);
    for (const OpUse& u : c.uses) covered.insert(u.op);
  }
  for (int i = 0; op_name(static_cast<Op>(i)) != "unknown op"; ++i) {
    EXPECT_TRUE(covered.count(static_cast<Op>(i))) << "no harness case for " << op_name(static_cast<Op>(i));
  }
}

// Each format the CPU multiplies: matmul with n_out a multiple of 16 (packed where the format
// packs) and not, one token and many, and an embedding lookup.
TEST(OpHarnessTable, EveryWeightFormatIsCovered) {
  const DType formats[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  for (DType type : formats) {
    const std::string name(dtype_name(type));
    bool packable = false, unpackable = false, decode = false, prefill = false, embed = false;
    for (const OpCase& c : table()) {
      if (c.uses.empty() || c.uses[0].dtype != type) continue;
      if (c.op == Op::kEmbed) embed = true;
      if (c.op != Op::kMatmul || c.name.rfind(name + " ", 0) != 0) continue;
      const int64_t n_out = std::stoll(c.name.substr(name.size() + 1));
      (n_out % 16 == 0 ? packable : unpackable) = true;
      (c.work.bound == Bound::kMemory ? decode : prefill) = true;  // one token: bound by the weight bytes
    }
    EXPECT_TRUE(packable && unpackable) << name << ": matmul needs n_out both a multiple of 16 and not";
    EXPECT_TRUE(decode && prefill) << name << ": matmul needs one token and many";
    EXPECT_TRUE(embed) << name << ": no embed case";
    EXPECT_TRUE(backend("cpu")->supports({Op::kMatmul, type})) << name;
  }
}

TEST(OpHarnessTable, PerfCasesBuildOnTheCpu) {
  // The perf table's cases are large; this checks they are well formed, not their speed: every
  // one is supported and names its work.
  for (const OpCase& c : op_cases(CaseSet::kPerf)) {
    for (const OpUse& u : c.uses) EXPECT_TRUE(backend("cpu")->supports(u)) << c.label();
    EXPECT_GT(c.work.flops + c.work.bytes, 0.0) << c.label();
  }
}

}  // namespace
}  // namespace deepinfer::backend::harness
