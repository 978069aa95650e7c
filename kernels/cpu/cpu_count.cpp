#include "kernels/cpu/cpu_count.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/cgroup.h"

namespace llmq::kernels {

int QuotaCpus(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0 || quota == "max") return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (end == quota.c_str() || *end != '\0' || q <= 0) return 0;
  return static_cast<int>((q + period - 1) / period);
}

CpuBudget ReadCpuBudget() {
  CpuBudget b;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    b.affinity = CPU_COUNT(&set);
  // Every cgroup from ours up to the root may carry a quota, and the tightest one binds.
  //   v2: the line "0::/path" of /proc/self/cgroup, cpu.max under /sys/fs/cgroup (or
  //       /sys/fs/cgroup/unified on a hybrid host);
  //   v1: the line "N:cpu,cpuacct:/path", cpu.cfs_quota_us / cpu.cfs_period_us under
  //       /sys/fs/cgroup/cpu,cpuacct (or /sys/fs/cgroup/cpu).
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    const size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    // Appended rather than "," + substr + ",": GCC 12 warns (-Wrestrict) on that at -O2, wrongly.
    std::string controllers = ",";
    controllers.append(line, c1 + 1, c2 - c1 - 1).push_back(',');
    const bool v2 = line.compare(0, c2 + 1, "0::") == 0;
    if (!v2 && controllers.find(",cpu,") == std::string::npos) continue;
    const std::vector<std::string> roots =
        v2 ? std::vector<std::string>{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
           : std::vector<std::string>{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"};
    for (const std::string& root : roots)
      for (const std::string& path : CgroupAncestry(line.substr(c2 + 1))) {
        const std::string dir = root + (path == "/" ? "" : path);
        std::string file, text;
        if (v2) {
          file = dir + "/cpu.max";
          std::ifstream f(file);
          std::getline(f, text);
        } else {
          file = dir + "/cpu.cfs_quota_us";
          std::ifstream q(file), per(dir + "/cpu.cfs_period_us");
          std::string quota, period;
          if (std::getline(q, quota) && std::getline(per, period))
            text = (quota == "-1" ? "max" : quota) + " " + period;
        }
        const int cpus = QuotaCpus(text);
        if (cpus > 0 && (b.quota == 0 || cpus < b.quota)) {
          b.quota = cpus;
          b.quota_file = file;
        }
      }
  }
  b.usable = b.quota > 0 && b.quota < b.affinity ? b.quota : b.affinity;
  return b;
}

int UsableCpus() {
  static const int usable = ReadCpuBudget().usable;
  return usable;
}

std::string DescribeCpuBudget(const CpuBudget& b) {
  std::string s = "affinity " + std::to_string(b.affinity) + ", ";
  if (b.quota > 0)
    return s + "cgroup quota " + std::to_string(b.quota) + (b.quota == 1 ? " CPU" : " CPUs") +
           " in " + b.quota_file;
  return s + "no cgroup quota";
}

}  // namespace llmq::kernels
