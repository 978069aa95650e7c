// How many CPUs this process may really use: the CPUs of its affinity mask (sched_getaffinity:
// taskset, cpusets, systemd's CPUAffinity=), capped by its cgroup CPU quota (v2 cpu.max, v1 cfs
// quota/period; rounded up: "150000 100000" allows 2 CPUs' worth). nproc on the host is not it.
#pragma once

#include <string>
#include <vector>

namespace llmq::kernels {

struct CpuBudget {
  int affinity = 1;        // CPUs in the affinity mask (>= 1)
  int quota = 0;           // CPUs the cgroup quota allows, rounded up; 0 = no quota
  int usable = 1;          // min(affinity, quota when set)
  std::string quota_file;  // the cpu.max that set `quota` ("" when none)
};

// Reads the affinity mask and the cgroup (/proc/self/cgroup, cpu.max under /sys/fs/cgroup, and
// those of the parent cgroups: the tightest quota wins). Never fails: what cannot be read is left
// out.
CpuBudget ReadCpuBudget();
// Parses one cpu.max's text: "max 100000" -> 0 (no quota), "150000 100000" -> 2; 0 when
// malformed.
int QuotaCpus(const std::string& cpu_max);
// ReadCpuBudget().usable, read once.
int UsableCpus();
// Why b.usable is what it is: "affinity 2, no cgroup quota" / "affinity 8, cgroup quota 1 CPU in
// /sys/fs/cgroup/.../cpu.max".
std::string DescribeCpuBudget(const CpuBudget& b);

}  // namespace llmq::kernels
