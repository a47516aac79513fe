// Command-line flags of one subcommand: "--name value", "--name=value", "-x value" and
// boolean switches. Unknown flags and missing values are errors naming the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::cli {

struct FlagSpec {
  std::set<std::string> with_value;  // "--model", "-m", ...
  std::set<std::string> switches;    // "--json", ...
  std::map<std::string, std::string> aliases;  // "-m" -> "--model"
  // False for a command without positional arguments: a stray word (a flag's value split off
  // by the shell, a misspelt flag without its dashes) is then an error, not silently ignored.
  bool takes_positional = true;
};

class Args {
 public:
  static Result<Args> parse(const std::vector<std::string>& argv, const FlagSpec& spec);

  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The last value of a flag given more than once; get_all: every value, in order.
  std::optional<std::string> get(const std::string& flag) const;
  std::vector<std::string> get_all(const std::string& flag) const;
  Result<int64_t> get_int(const std::string& flag, int64_t fallback) const;
  Result<double> get_float(const std::string& flag, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  std::vector<std::string> positional_;
};

// "1,2,3" -> {1, 2, 3}; INVALID_ARGUMENT naming the bad item.
Result<std::vector<int32_t>> parse_token_list(const std::string& text, const std::string& flag);

}  // namespace deepinfer::cli
