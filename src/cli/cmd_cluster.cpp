// deepinfer cluster up CONFIG: a local topology (replicas, the router, one KV-store directory)
// as processes on loopback, from one JSON file that also documents the real deployment
// (docs/deployment.md). Runs in the foreground until SIGINT or SIGTERM, then stops everything:
// the router first (no new requests), then the replicas, each SIGTERM then SIGKILL after its
// grace.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "server/http_client.h"

namespace deepinfer::cli {

namespace {

const char* kClusterUsage = R"(usage: deepinfer cluster up CONFIG
  Starts the topology CONFIG describes on this host and stops it on SIGINT/SIGTERM. CONFIG:
  {
    "model": "smollm2-135m-instruct",      every replica's -m
    "store": "cluster/kv-store",           optional: one --kv-store directory for all replicas
    "log_dir": "cluster/logs",             one log file per process (default cluster-logs)
    "replicas": [{"port": 8101, "role": "both", "args": ["--threads", "1"]}, ...],
    "router": {"port": 8100, "policy": "cache-aware", "args": []}
  }
  Paths are relative to the current directory. role: "both" (default), "prefill" or "decode"
  (serve --role; the router gets them as --replica, --prefill and --decode; prefill and
  decode need "store"). Exit 1 when a process fails to start or dies while the cluster runs.
)";

struct Process {
  std::string name;
  std::vector<std::string> argv;
  std::string log;
  pid_t pid = -1;
  uint16_t port = 0;
};

Result<nlohmann::json> read_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return invalid_argument("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return invalid_argument(path + ": expected a JSON object");
  return doc;
}

Result<std::vector<std::string>> string_list(const nlohmann::json& obj, const std::string& field) {
  std::vector<std::string> out;
  if (!obj.contains("args")) return out;
  if (!obj["args"].is_array()) return invalid_argument(field + ".args: expected a list of strings");
  for (const auto& a : obj["args"]) {
    if (!a.is_string()) return invalid_argument(field + ".args: expected a list of strings");
    out.push_back(a.get<std::string>());
  }
  return out;
}

Result<uint16_t> port_of(const nlohmann::json& obj, const std::string& field) {
  if (!obj.is_object() || !obj.contains("port") || !obj["port"].is_number_integer()) {
    return invalid_argument(field + ".port: expected a port number");
  }
  const int64_t port = obj["port"].get<int64_t>();
  if (port < 1 || port > 65535) return invalid_argument(field + ".port: must be 1-65535");
  return static_cast<uint16_t>(port);
}

// The processes of the topology, replicas first, the router last.
Result<std::vector<Process>> plan(const nlohmann::json& config, const std::string& self) {
  const std::string model = config.value("model", "");
  const std::string log_dir = config.value("log_dir", "cluster-logs");
  if (!config.contains("replicas") || !config["replicas"].is_array() || config["replicas"].empty()) {
    return invalid_argument("replicas: expected a non-empty list");
  }
  std::vector<Process> out;
  std::vector<std::string> router_argv = {self, "router", "--host", "127.0.0.1"};
  for (size_t i = 0; i < config["replicas"].size(); ++i) {
    const std::string field = "replicas[" + std::to_string(i) + "]";
    const auto& r = config["replicas"][i];
    DI_ASSIGN_OR_RETURN(uint16_t port, port_of(r, field));
    const std::string role = r.value("role", "both");
    if (role != "both" && role != "prefill" && role != "decode") {
      return invalid_argument(field + ".role: expected \"both\", \"prefill\" or \"decode\", got \"" + role + "\"");
    }
    if (role != "both" && !config.contains("store")) {
      return invalid_argument(field + ".role " + role + " needs \"store\": the store carries KV pages between the workers");
    }
    Process p{"replica" + std::to_string(i), {self, "serve", "--host", "127.0.0.1", "--port", std::to_string(port)},
              log_dir + "/replica" + std::to_string(i) + ".log", -1, port};
    if (role != "both") p.argv.insert(p.argv.end(), {"--role", role});
    if (!model.empty()) p.argv.insert(p.argv.end(), {"-m", model});
    if (config.contains("store")) p.argv.insert(p.argv.end(), {"--kv-store", config["store"].get<std::string>()});
    DI_ASSIGN_OR_RETURN(auto extra, string_list(r, field));
    p.argv.insert(p.argv.end(), extra.begin(), extra.end());
    const char* pool = role == "prefill" ? "--prefill" : role == "decode" ? "--decode" : "--replica";
    router_argv.insert(router_argv.end(), {pool, "http://127.0.0.1:" + std::to_string(port)});
    out.push_back(std::move(p));
  }
  const nlohmann::json router = config.value("router", nlohmann::json::object());
  DI_ASSIGN_OR_RETURN(uint16_t port, port_of(router, "router"));
  router_argv.insert(router_argv.end(), {"--port", std::to_string(port)});
  if (router.contains("policy")) router_argv.insert(router_argv.end(), {"--policy", router["policy"].get<std::string>()});
  DI_ASSIGN_OR_RETURN(auto extra, string_list(router, "router"));
  router_argv.insert(router_argv.end(), extra.begin(), extra.end());
  out.push_back({"router", router_argv, log_dir + "/router.log", -1, port});
  return out;
}

Status spawn(Process& p) {
  const int fd = ::open(p.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return unavailable("cannot open " + p.log);
  std::vector<char*> argv;
  for (auto& a : p.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return unavailable("fork failed");
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the child takes its own signals
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(fd);
  p.pid = pid;
  return Status::ok_status();
}

// Waits for the process's /health, or its death, or the deadline.
Status wait_healthy(const Process& p, std::chrono::seconds limit) {
  server::HttpClient client({"127.0.0.1", p.port, ""});
  const auto deadline = server::Clock::now() + limit;
  while (server::Clock::now() < deadline) {
    auto r = client.get("/health", server::Clock::now() + std::chrono::seconds(1));
    if (r.ok() && r->status == 200) return Status::ok_status();
    int status = 0;
    if (::waitpid(p.pid, &status, WNOHANG) == p.pid) return unavailable(p.name + " exited during start-up (see " + p.log + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return unavailable(p.name + " was not healthy within " + std::to_string(limit.count()) + " s (see " + p.log + ")");
}

void stop(std::vector<Process>& procs) {
  for (auto it = procs.rbegin(); it != procs.rend(); ++it) {  // router first
    if (it->pid <= 0) continue;
    ::kill(it->pid, SIGTERM);
    int status = 0;
    bool gone = false;
    for (int i = 0; i < 300 && !gone; ++i) {  // 30 s grace
      gone = ::waitpid(it->pid, &status, WNOHANG) == it->pid;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!gone) {
      std::fprintf(stderr, "deepinfer cluster: %s ignored SIGTERM for 30 s: SIGKILL\n", it->name.c_str());
      ::kill(it->pid, SIGKILL);
      ::waitpid(it->pid, &status, 0);
    }
    it->pid = -1;
  }
}

}  // namespace

int cluster_command(const std::vector<std::string>& argv) {
  if (argv.size() == 1 && (argv[0] == "--help" || argv[0] == "-h")) {
    std::fputs(kClusterUsage, stdout);
    return 0;
  }
  if (argv.size() != 2 || argv[0] != "up") return fail(std::string("expected: cluster up CONFIG\n") + kClusterUsage, 2);
  auto config = read_config(argv[1]);
  if (!config.ok()) return fail(config.status().message(), 2);
  auto procs = plan(*config, std::filesystem::read_symlink("/proc/self/exe").string());
  if (!procs.ok()) return fail(argv[1] + ": " + procs.status().message(), 2);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(procs->front().log).parent_path(), ec);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  for (auto& p : *procs) {
    Status s = spawn(p);
    if (s.ok()) s = wait_healthy(p, std::chrono::seconds(300));
    if (!s.ok()) {
      stop(*procs);
      return fail(s.message());
    }
    std::fprintf(stderr, "deepinfer cluster: %s on http://127.0.0.1:%u (pid %d, log %s)\n", p.name.c_str(),
                 static_cast<unsigned>(p.port), static_cast<int>(p.pid), p.log.c_str());
  }
  std::fprintf(stderr, "deepinfer cluster: up; SIGINT or SIGTERM stops it\n");
  int code = 0;
  while (true) {
    timespec tick{1, 0};
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
    bool died = false;
    for (auto& p : *procs) {
      int status = 0;
      if (p.pid > 0 && ::waitpid(p.pid, &status, WNOHANG) == p.pid) {
        std::fprintf(stderr, "deepinfer cluster: %s exited (status %d); stopping the rest\n", p.name.c_str(), status);
        p.pid = -1;
        died = true;
      }
    }
    if (died) {
      code = 1;
      break;
    }
  }
  stop(*procs);
  std::fprintf(stderr, "deepinfer cluster: stopped\n");
  return code;
}

}  // namespace deepinfer::cli
