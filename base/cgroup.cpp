#include "base/cgroup.h"

namespace llmq {

std::vector<std::string> CgroupAncestry(const std::string& path) {
  std::vector<std::string> out;
  for (std::string p = path.empty() ? "/" : path;;) {
    out.push_back(p);
    if (p == "/") return out;
    const size_t slash = p.rfind('/');
    p = slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
  }
}

}  // namespace llmq
