#include "cli/args.h"

#include <charconv>

namespace deepinfer::cli {

Result<Args> Args::parse(const std::vector<std::string>& argv, const FlagSpec& spec) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (!spec.takes_positional) return invalid_argument("unexpected argument '" + arg + "' (see --help)");
      args.positional_.push_back(arg);
      continue;
    }
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (auto it = spec.aliases.find(arg); it != spec.aliases.end()) arg = it->second;
    if (spec.switches.count(arg)) {
      if (inline_value) return invalid_argument("flag " + arg + " takes no value");
      args.values_[arg] = std::string(1, '1');  // not = "1": GCC 12 warns (-Wrestrict, a false positive)
    } else if (spec.with_value.count(arg)) {
      if (inline_value) {
        args.values_[arg] = *inline_value;
      } else {
        if (i + 1 >= argv.size()) return invalid_argument("flag " + arg + " needs a value");
        args.values_[arg] = argv[++i];
      }
      args.all_values_[arg].push_back(args.values_[arg]);
    } else {
      return invalid_argument("unknown flag " + arg + " (see --help)");
    }
  }
  return args;
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::get_all(const std::string& flag) const {
  auto it = all_values_.find(flag);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}

Result<int64_t> Args::get_int(const std::string& flag, int64_t fallback) const {
  auto v = get(flag);
  if (!v) return fallback;
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || ptr != v->data() + v->size()) {
    return invalid_argument("flag " + flag + " needs an integer, got '" + *v + "'");
  }
  return out;
}

Result<double> Args::get_float(const std::string& flag, double fallback) const {
  auto v = get(flag);
  if (!v) return fallback;
  double out = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || ptr != v->data() + v->size()) {
    return invalid_argument("flag " + flag + " needs a number, got '" + *v + "'");
  }
  return out;
}

Result<std::vector<int32_t>> parse_token_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0) {
      return invalid_argument("flag " + flag + ": '" + item + "' is not a token id (expected a comma-separated list such as 1,2,3)");
    }
    ids.push_back(id);
    pos = comma + 1;
  }
  if (ids.empty()) return invalid_argument("flag " + flag + " needs at least one token id");
  return ids;
}

}  // namespace deepinfer::cli
