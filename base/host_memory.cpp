#include "base/host_memory.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/cgroup.h"

namespace llmq {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  s = Trim(s);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v < 0) return std::nullopt;
  return v;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<int64_t> ParseMemAvailable(std::string_view meminfo) {
  for (size_t at = 0; at < meminfo.size();) {
    size_t nl = meminfo.find('\n', at);
    if (nl == std::string_view::npos) nl = meminfo.size();
    std::string_view line = meminfo.substr(at, nl - at);
    at = nl + 1;
    constexpr std::string_view kKey = "MemAvailable:";
    if (line.substr(0, kKey.size()) != kKey) continue;
    line = Trim(line.substr(kKey.size()));
    int64_t scale = 1;
    if (line.size() > 2 && line.substr(line.size() - 2) == "kB") {
      scale = 1024;
      line.remove_suffix(2);
    }
    const auto v = ParseInt(line);
    if (!v) return std::nullopt;
    return *v * scale;
  }
  return std::nullopt;
}

std::optional<int64_t> CgroupRoom(std::string_view memory_max, std::string_view memory_current) {
  const auto limit = ParseInt(memory_max), used = ParseInt(memory_current);
  if (!limit || !used) return std::nullopt;  // "max": no limit
  return std::max<int64_t>(*limit - *used, 0);
}

std::string CgroupV2Path(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line.substr(0, 3) == "0::") return std::string(Trim(line.substr(3)));
  }
  return "";
}

std::optional<int64_t> CgroupTreeRoom(const std::string& root, const std::string& path) {
  std::optional<int64_t> room;
  for (const std::string& p : CgroupAncestry(path)) {
    const std::string dir = root + (p == "/" ? std::string() : p);
    const auto r = CgroupRoom(ReadFile(dir + "/memory.max"), ReadFile(dir + "/memory.current"));
    if (r && (!room || *r < *room)) room = r;
  }
  return room;
}

HostMemory LowerOf(std::optional<int64_t> mem_available, std::optional<int64_t> cgroup_room) {
  if (cgroup_room && (!mem_available || *cgroup_room < *mem_available))
    return {*cgroup_room, "cgroup memory.max - memory.current"};
  if (mem_available) return {*mem_available, "MemAvailable"};
  return {};
}

HostMemory ReadHostMemory() {
  if (const char* fake = std::getenv("LLMQ_TEST_MEMINFO"); fake && *fake)
    return LowerOf(ParseMemAvailable(ReadFile(fake)), std::nullopt);
  std::optional<int64_t> room;
  const std::string cg = CgroupV2Path(ReadFile("/proc/self/cgroup"));
  if (!cg.empty()) room = CgroupTreeRoom("/sys/fs/cgroup", cg);
  return LowerOf(ParseMemAvailable(ReadFile("/proc/meminfo")), room);
}

int64_t HostKvBudget(const HostKvInputs& in) {
  const int64_t share = static_cast<int64_t>(static_cast<double>(in.memory) * in.utilization);
  int64_t budget = std::max<int64_t>(share - in.weight_bytes - in.working_bytes, 0);
  if (in.max_num_seqs > 0 && in.max_context > 0)
    budget =
        std::min(budget, 2 * int64_t{in.max_num_seqs} * in.max_context * in.kv_bytes_per_token);
  return budget;
}

}  // namespace llmq
