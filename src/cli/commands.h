// The deepinfer subcommands. Each takes its arguments after the subcommand name and returns
// the process exit code (0 success, 1 runtime error, 2 usage error).
#pragma once

#include <string>
#include <vector>

namespace deepinfer::cli {

int run_command(const std::vector<std::string>& args);
int chat_command(const std::vector<std::string>& args);
int score_command(const std::vector<std::string>& args);
int generate_command(const std::vector<std::string>& args);
int tokenize_command(const std::vector<std::string>& args);
int detokenize_command(const std::vector<std::string>& args);
int render_command(const std::vector<std::string>& args);
int parse_command(const std::vector<std::string>& args);
int serve_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int kvstore_command(const std::vector<std::string>& args);
int router_command(const std::vector<std::string>& args);
int cluster_command(const std::vector<std::string>& args);

// Prints "deepinfer: <message>" to stderr and returns `code`.
int fail(const std::string& message, int code = 1);

}  // namespace deepinfer::cli
