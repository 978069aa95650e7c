#include "engine/structured/grammar.h"

#include <cstdio>
#include <memory>

#include "engine/structured/regex.h"

namespace llmq {

std::string RegexEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else if (std::string_view("\\^$.|?*+()[]{}/-").find(ch) != std::string_view::npos) {
      out += '\\';
      out += ch;
    } else {
      out += ch;  // UTF-8 bytes of other characters pass as they are
    }
  }
  return out;
}

Grammar::Symbol Grammar::Lexeme(std::string_view regex) {
  LexemeSpec spec;
  spec.regex = std::string(regex);
  return Lexeme(spec);
}

std::string Grammar::SpecKey(const LexemeSpec& spec) {
  const Regex::Options& o = spec.options;
  std::string key = std::string(o.mode == Regex::Mode::kSearch ? "s" : "f") +
                    (o.json_string ? "j" : "-") + (o.quoted ? "q" : "-") +
                    (spec.is_key_except ? "k" : "-") + spec.regex;
  for (const std::string& n : spec.key_except) key += '\0' + n;
  if (spec.is_string_length)
    key += "\1" + std::to_string(spec.min_length) + "," + std::to_string(spec.max_length);
  if (spec.multiple_of > 0)
    key += "\3" + std::to_string(spec.multiple_of) + "," + std::to_string(spec.not_multiple_of);
  if (spec.is_key_pattern) {
    key += "\2" + std::to_string(spec.pattern_subset);
    for (const std::string& p : spec.patterns) key += "," + std::to_string(p.size()) + ":" + p;
  }
  return key;
}

Grammar::Symbol Grammar::Lexeme(const LexemeSpec& spec) {
  const std::string key = SpecKey(spec);
  if (const auto it = lexeme_index_.find(key); it != lexeme_index_.end()) return {it->second, true};
  const auto id = static_cast<int32_t>(lexemes_.size());
  lexemes_.push_back(spec);
  lexeme_index_.emplace(key, id);
  return {id, true};
}

Grammar::Symbol Grammar::Literal(std::string_view text) {
  return Lexeme(RegexEscape(text));
}

Grammar::Symbol Grammar::NewRule(std::string name) {
  rules_.push_back({std::move(name), {}});
  return {static_cast<int32_t>(rules_.size() - 1), false};
}

void Grammar::AddAlternative(Symbol rule, std::vector<Symbol> rhs) {
  rules_[static_cast<size_t>(rule.id)].alternatives.push_back(std::move(rhs));
}

Status Grammar::CompileLexemes(std::vector<std::unique_ptr<LexemeAutomaton>>* out) const {
  // A lexeme's automaton that could not be built: its code kept, the lexeme named.
  const auto Failed = [](size_t i, const Status& st) {
    return (st.code() == Status::Code::kUnsupported ? Status::Unsupported
                                                    : Status::InvalidArgument)(
        "grammar: lexeme " + std::to_string(i) + ": " + st.message());
  };
  out->clear();
  for (size_t i = 0; i < lexemes_.size(); ++i) {
    if (lexemes_[i].is_string_length && !lexemes_[i].regex.empty()) {  // a regex and a length
      std::unique_ptr<Regex> re;
      std::unique_ptr<BoundedStringAutomaton> both;
      Status st = Regex::Compile(lexemes_[i].regex, lexemes_[i].options, &re);
      if (st.ok())
        st = BoundedStringAutomaton::Build(re.get(), lexemes_[i].min_length, lexemes_[i].max_length,
                                           &both, SpecKey(lexemes_[i]));
      if (!st.ok()) return Failed(i, st);
      if (both->Start() == LexemeAutomaton::kDead)
        return Status::InvalidArgument("grammar: lexeme " + std::to_string(i) + " /" +
                                       lexemes_[i].regex + "/ of a length matches nothing");
      out->push_back(std::move(both));
      continue;
    }
    if (lexemes_[i].multiple_of > 0) {  // an integer range and a divisor
      std::unique_ptr<Regex> re;
      std::unique_ptr<MultipleAutomaton> multiples;
      Status st = Regex::Compile(lexemes_[i].regex, lexemes_[i].options, &re);
      if (st.ok())
        st = MultipleAutomaton::Build(re.get(), lexemes_[i].multiple_of,
                                      lexemes_[i].not_multiple_of, &multiples);
      if (!st.ok()) return Failed(i, st);
      if (multiples->Start() == LexemeAutomaton::kDead)
        return Status::InvalidArgument("grammar: lexeme " + std::to_string(i) + " /" +
                                       lexemes_[i].regex + "/ has no multiple of " +
                                       std::to_string(lexemes_[i].multiple_of));
      out->push_back(std::move(multiples));
      continue;
    }
    if (lexemes_[i].is_string_length) {
      out->push_back(
          std::make_unique<StringLengthAutomaton>(lexemes_[i].min_length, lexemes_[i].max_length));
      continue;
    }
    if (lexemes_[i].is_key_pattern) {
      std::unique_ptr<KeyPatternAutomaton> keys;
      if (Status st = KeyPatternAutomaton::Build(lexemes_[i].key_except, lexemes_[i].patterns,
                                                 lexemes_[i].pattern_subset, &keys);
          !st.ok())
        return Failed(i, st);
      if (keys->Start() == LexemeAutomaton::kDead)
        return Status::InvalidArgument("grammar: lexeme " + std::to_string(i) +
                                       " (a key of patterns) matches nothing");
      out->push_back(std::move(keys));
      continue;
    }
    if (lexemes_[i].is_key_except) {
      out->push_back(std::make_unique<KeyExceptAutomaton>(lexemes_[i].key_except));
      continue;
    }
    std::unique_ptr<Regex> re;
    if (Status st = Regex::Compile(lexemes_[i].regex, lexemes_[i].options, &re); !st.ok())
      return Failed(i, st);
    if (re->IsAccepting(re->start()))
      return Status::InvalidArgument("grammar: lexeme " + std::to_string(i) + " /" +
                                     lexemes_[i].regex + "/ matches the empty string");
    if (re->start() == Regex::kDead)
      return Status::InvalidArgument("grammar: lexeme " + std::to_string(i) + " /" +
                                     lexemes_[i].regex + "/ matches nothing");
    out->push_back(std::move(re));
  }
  return Status::Ok();
}

Status Grammar::Validate() {
  if (start_ < 0 || static_cast<size_t>(start_) >= rules_.size())
    return Status::InvalidArgument("grammar: no start rule");
  for (const Rule& r : rules_)
    for (const auto& alt : r.alternatives)
      for (const Symbol& s : alt)
        if (s.id < 0 || static_cast<size_t>(s.id) >= (s.lexeme ? lexemes_.size() : rules_.size()))
          return Status::InvalidArgument("grammar: rule " + r.name + " refers to no symbol");
  // Productive rules: a fixpoint (lexemes always are).
  std::vector<char> productive(rules_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (productive[i]) continue;
      for (const auto& alt : rules_[i].alternatives) {
        bool all = true;
        for (const Symbol& s : alt)
          all = all && (s.lexeme || productive[static_cast<size_t>(s.id)]);
        if (all) {
          productive[i] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  if (!productive[static_cast<size_t>(start_)])
    return Status::InvalidArgument("grammar: " + rules_[static_cast<size_t>(start_)].name +
                                   " admits no document");
  for (Rule& r : rules_)
    std::erase_if(r.alternatives, [&](const std::vector<Symbol>& alt) {
      for (const Symbol& s : alt)
        if (!s.lexeme && !productive[static_cast<size_t>(s.id)]) return true;
      return false;
    });
  return Status::Ok();
}

std::string Grammar::Dump() const {
  std::string out;
  for (size_t i = 0; i < lexemes_.size(); ++i)
    out += "L" + std::to_string(i) + " = /" +
           (lexemes_[i].is_key_pattern
                ? "<a key of patterns " + std::to_string(lexemes_[i].pattern_subset) + " of " +
                      std::to_string(lexemes_[i].patterns.size()) + " but " +
                      std::to_string(lexemes_[i].key_except.size()) + " names>"
            : lexemes_[i].is_key_except
                ? "<a key but " + std::to_string(lexemes_[i].key_except.size()) + " names>"
                : lexemes_[i].regex) +
           "/" + (lexemes_[i].options.quoted ? "q" : "") +
           (lexemes_[i].options.json_string ? "j" : "") +
           (lexemes_[i].options.mode == Regex::Mode::kSearch ? "s" : "") + "\n";
  for (size_t i = 0; i < rules_.size(); ++i) {
    out += (static_cast<int32_t>(i) == start_ ? "*" : "") + rules_[i].name + "#" +
           std::to_string(i) + " ::=";
    for (size_t a = 0; a < rules_[i].alternatives.size(); ++a) {
      out += a == 0 ? " " : " | ";
      if (rules_[i].alternatives[a].empty()) out += "()";
      for (const Symbol& s : rules_[i].alternatives[a])
        out += (s.lexeme ? "L" + std::to_string(s.id)
                         : rules_[static_cast<size_t>(s.id)].name + "#" + std::to_string(s.id)) +
               " ";
    }
    out += "\n";
  }
  return out;
}

void StartAfter(std::string_view text, Grammar* g) {
  const Grammar::Symbol lead = g->Lexeme(RegexEscape(text) + "[ \t\n\r]{0,20}");
  const Grammar::Symbol start = g->NewRule("after_" + std::string(text));
  g->AddAlternative(start, {lead, Grammar::Symbol{g->start(), false}});
  g->set_start(start);
}

}  // namespace llmq
