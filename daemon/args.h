// Args: the flags of one subcommand: "--name value", "--name=value", boolean "--name", and
// positional arguments. Unknown flags are an error, reported with the subcommand's usage.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace llmq::cli {

class Args {
 public:
  // `valued`: flags that take a value; `booleans`: flags that do not.
  Args(std::set<std::string> valued, std::set<std::string> booleans)
      : valued_(std::move(valued)), booleans_(std::move(booleans)) {}
  // "-o" stands for "--output", say.
  void Alias(const std::string& short_flag, const std::string& long_name) {
    aliases_[short_flag] = long_name;
  }
  // Parses argv[first, argc). Returns false with `error` set on a bad command line.
  bool Parse(int argc, char** argv, int first, std::string* error);
  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::optional<std::string> Get(const std::string& flag) const;
  std::string Get(const std::string& flag, const std::string& def) const;
  // Numeric flags; `error` is set (naming the flag) when the value does not parse.
  bool GetInt(const std::string& flag, long long def, long long* out, std::string* error) const;
  bool GetDouble(const std::string& flag, double def, double* out, std::string* error) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::set<std::string> valued_, booleans_;
  std::map<std::string, std::string> values_, aliases_;
  std::vector<std::string> positional_;
};

}  // namespace llmq::cli
