// Shared prefixes of a job (issue 29): the prefix planner's largest shared-prefix groups, recorded
// by ingest in the job's options JSON (JobRecord::options) under the key "prefix_groups", for the
// job report's "Largest shared prefixes":
//   "prefix_groups": [{"shared_tokens": 812, "requests": 40, "depth": 2}, ...]
// largest saving first, at most kSharedPrefixesKept entries; [] when no two requests of the job
// share a prefix. A job ingested before the key existed has none (readers keep their fallback).
// The other keys of the options are the submitter's and are kept as they are.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmq::jobs {

inline constexpr const char* kPrefixGroupsKey = "prefix_groups";
inline constexpr size_t kSharedPrefixesKept = 10;

struct SharedPrefix {
  int64_t shared_tokens = 0;  // prompt tokens every request of the group starts with
  int64_t requests = 0;       // the job's requests in the group
  int64_t depth = 1;          // nesting: 1 for a top-level group, 2 for a group inside one, ...
  // Prompt tokens not computed again when the prefix is computed once for the whole group.
  int64_t Saved() const { return shared_tokens * (requests - 1); }
  bool operator==(const SharedPrefix&) const = default;
};

// `options` with kPrefixGroupsKey set to `groups` (in their order). Empty options become an object
// holding only the key; options that are not a JSON object are returned unchanged (not ours to
// rewrite).
std::string WithSharedPrefixes(const std::string& options, const std::vector<SharedPrefix>& groups);

// Whether `options` records the groups (the key holds an array); *out gets its well-formed
// entries (objects with integer shared_tokens >= 1, requests >= 2 and depth >= 1) in order.
bool SharedPrefixesOf(const std::string& options, std::vector<SharedPrefix>* out);

// The groups of one job, merged over the chunks ingest plans: the same prefix (its identity: a
// hash of the planner's key for it) seen in several chunks is one group, its requests summed and
// its depth the deepest seen. Memory is bounded: past 2 * kCarried prefixes, only the kCarried
// that save the most are kept (a prefix small in every chunk may then be missed).
class SharedPrefixTally {
 public:
  static constexpr size_t kCarried = 256;
  void Add(uint64_t prefix, const SharedPrefix& g);
  // The kSharedPrefixesKept that save the most, largest first (ties: more shared tokens, then
  // the first seen).
  std::vector<SharedPrefix> Top() const;

 private:
  struct Entry {
    SharedPrefix group;
    uint64_t seen = 0;  // order of first appearance
  };
  std::vector<std::pair<uint64_t, Entry>> Ranked() const;
  std::unordered_map<uint64_t, Entry> by_prefix_;
  uint64_t next_seen_ = 0;
};

}  // namespace llmq::jobs
