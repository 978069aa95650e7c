// ObjectRules: the members of a JSON object as grammar rules, for the JSON Schema compiler
// (engine/structured/json_schema.cpp). The listed properties come in one fixed order, each present
// or absent, then other keys where the schema allows them. What may be present together is a
// formula over the listed properties' presence in clauses (`required`; dependentRequired;
// dependentSchemas' required, not required, anyOf/oneOf of those), the number of members is
// bounded (minProperties, maxProperties), a property's value may depend on which others are
// present (dependentSchemas' properties), and some member may be required to be a witness (a
// member of some kind of key with some value: what not {additionalProperties} asks).
//
// Each rule is a state: the next listed property that may come, the members so far (counted up
// to what the bounds can tell apart), what the formula still asks of the properties not yet
// decided (its clauses with the decided ones put in), which of the properties a later value
// depends on are present, and whether the witness has been written. States are made as the first
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
    // It may be the member `need_witness` asks for: written so (Member's `witness`) once.
    bool witness = false;
  };
  std::vector<Prop> props;  // in the order they are written
  // Clauses over the listed properties' presence, all of which must hold: literal +(j+1) says
  // props[j] is present, -(j+1) absent. `required` need not be repeated here.
  std::vector<std::vector<int>> clauses;
  int64_t min_members = 0;   // every member counts, listed or not
  int64_t max_members = -1;  // < 0: unbounded
  // Some member must be a witness (not {additionalProperties: S} on an object that may have any
  // name: a key of some kind whose value fails S): a listed property that may be one, written as
  // its witness member, or an other key's witness member. Other members may be witnesses too.
  bool need_witness = false;
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
  // props[j]'s member (`"name": value`) where of props[j].depends_on, those whose bit is set in
  // `present` are present (bit k: depends_on[k]); `witness`: as the witness (props[j].witness).
  using Member =
      std::function<Status(size_t j, uint64_t present, bool witness, Grammar::Symbol* out)>;

  // The object's rule (`{ members }`) into *out: `other`, where set, is one member of a key not
  // listed (any number of them after the listed ones); `witness`, where set, one that is a
  // witness (need_witness). `name` prefixes the rules' names.
  // Unsupported: more than kMaxStates states, or a value depending on more than
  // kMaxLaterDependencies properties not yet decided.
  [[nodiscard]] static Status Build(Grammar* g, const ObjectLayout& layout, const Delimiters& d,
                                    const Member& member, std::optional<Grammar::Symbol> other,
                                    std::optional<Grammar::Symbol> witness, const std::string& name,
                                    Grammar::Symbol* out);
};

}  // namespace llmq
