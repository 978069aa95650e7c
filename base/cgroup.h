// cgroup paths, shared by what reads a cgroup's limits: the memory the process may take
// (base/host_memory.h) and the CPUs it may use (kernels/cpu/cpu_count.h).
#pragma once

#include <string>
#include <vector>

namespace llmq {

// A cgroup path of /proc/self/cgroup ("/system.slice/llmq.service") and its ancestors, leaf first,
// ending with the root "/": every level whose limits bind the process (a limit set on a parent
// slice binds its children too). "" gives {"/"}.
std::vector<std::string> CgroupAncestry(const std::string& path);

}  // namespace llmq
