// ObjectRules: the members of a JSON object as grammar rules, for the JSON Schema compiler
// (engine/structured/json_schema_object.cpp). The listed properties come in one fixed order, each
// present or absent, then other keys where the schema allows them. What may be present together is
// a formula over the listed properties' presence in clauses (`required`; dependentRequired;
// dependentSchemas' required, not required, anyOf/oneOf of those), the number of members is
// bounded (minProperties, maxProperties), a property's value may depend on which others are
// present (dependentSchemas' properties), and some members may be required to be witnesses
// (each a member of some kind of key with some value: what not {additionalProperties} asks).
//
// Each rule is a state: the next listed property that may come, the members so far (counted up
// to what the bounds can tell apart), what the formula still asks of the properties not yet
// decided (its clauses with the decided ones put in), which of the properties a later value
// depends on are present, and which witnesses have been written. States are made as the first
// one reaches them; one whose formula has an empty clause is not made, and where the formula can
// still not be met the grammar's Validate drops what leads there (no prefix is accepted that cannot
// be completed). Without clauses, bounds and dependent values there is one state per listed
// property (two rules each: the first member, and one after a comma), as the compiler has always
// written objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/structured/grammar.h"

namespace llmq {

struct ObjectLayout {
  struct Prop {
    bool required = false;
    // Listed properties (indices) whose presence changes this one's value: its member's rule
    // depends on which of them are present (not itself).
    std::vector<size_t> depends_on;
    // The witnesses it may be (bit w: witness w of `witnesses`): written so (Member's `witness`).
    uint32_t witness = 0;
  };
  std::vector<Prop> props;  // in the order they are written
  // Clauses over the listed properties' presence, all of which must hold: literal +(j+1) says
  // props[j] is present, -(j+1) absent. `required` need not be repeated here.
  std::vector<std::vector<int>> clauses;
  int64_t min_members = 0;   // every member counts, listed or not
  int64_t max_members = -1;  // < 0: unbounded
  // How many witnesses the object must have (at most kMaxWitnesses), each some member of its own
  // kind (not {additionalProperties: S} on an object that may have any name: a key of some kind
  // whose value fails S): a listed property that may be it, written as its witness member, or an
  // other key's witness member. One member may be several witnesses at once.
  int witnesses = 0;
};

class ObjectRules {
 public:
  // The most states one object may take (beyond: Unsupported).
  static constexpr size_t kMaxStates = 4096;
  // The most properties a value depends on, not yet decided where it is written.
  static constexpr size_t kMaxLaterDependencies = 6;

  struct Delimiters {
    Grammar::Symbol lbrace, rbrace, comma;
  };
  static constexpr int kMaxWitnesses = 4;

  // props[j]'s member (`"name": value`) where of props[j].depends_on, those whose bit is set in
  // `present` are present (bit k: depends_on[k]); as the witnesses in `witness` (a subset of
  // props[j].witness; 0: plainly).
  using Member =
      std::function<Status(size_t j, uint64_t present, uint32_t witness, Grammar::Symbol* out)>;
  // One member of a key not listed that is each of the witnesses in `witness` (nonzero) into
  // *out; nullopt where no key is of all their kinds.
  using OtherWitness = std::function<Status(uint32_t witness, std::optional<Grammar::Symbol>* out)>;

  // The object's rule (`{ members }`) into *out: `other`, where set, is one member of a key not
  // listed (any number of them after the listed ones); `witness` (asked only where
  // layout.witnesses > 0 and `other` is set) those that are witnesses. A witness member must also
  // be one of `other`'s, a listed property's witness member one of its plain member's. `name`
  // prefixes the rules' names.
  // Unsupported: more than kMaxStates states, or a value depending on more than
  // kMaxLaterDependencies properties not yet decided.
  [[nodiscard]] static Status Build(Grammar* g, const ObjectLayout& layout, const Delimiters& d,
                                    const Member& member, std::optional<Grammar::Symbol> other,
                                    const OtherWitness& witness, const std::string& name,
                                    Grammar::Symbol* out);
};

}  // namespace llmq
