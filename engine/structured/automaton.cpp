#include "engine/structured/automaton.h"

#include "engine/structured/regex.h"

namespace llmq {

KeyExceptAutomaton::KeyExceptAutomaton(const std::vector<std::string>& names)
    : children_(1), end_(1, 0) {
  for (const std::string& name : names) {
    int at = 0;
    for (const char c : name) {
      const auto b = static_cast<uint8_t>(c);
      auto it = children_[static_cast<size_t>(at)].find(b);
      if (it == children_[static_cast<size_t>(at)].end()) {
        children_.emplace_back();
        end_.push_back(0);
        it = children_[static_cast<size_t>(at)]
                 .emplace(b, static_cast<int>(children_.size() - 1))
                 .first;
      }
      at = it->second;
    }
    end_[static_cast<size_t>(at)] = 1;
  }
  // JSON's string syntax: any character but '"', '\' and controls, or an escape.
  const Status st =
      Regex::Compile("\"(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})*\"",
                     Regex::Mode::kFull, &string_);
  (void)st;  // a fixed pattern: compiles
}

KeyExceptAutomaton::~KeyExceptAutomaton() = default;

int KeyExceptAutomaton::Intern(int trie, int str) {
  if (str == Regex::kDead) return kDead;
  const auto [it, fresh] =
      index_.emplace(std::make_pair(trie, str), static_cast<int>(states_.size()));
  if (fresh) states_.emplace_back(trie, str);
  return it->second;
}

int KeyExceptAutomaton::Start() {
  return Intern(kBefore, string_->start());
}

int KeyExceptAutomaton::Next(int state, uint8_t byte) {
  if (state < 0) return kDead;
  const auto [trie, str] = states_[static_cast<size_t>(state)];
  const int s2 = string_->Step(str, byte);
  if (s2 == Regex::kDead) return kDead;
  int t2 = kOut;
  if (trie == kBefore) {
    t2 = 0;  // the opening quote: at the trie's root
  } else if (trie >= 0) {
    if (byte == '"' && string_->IsAccepting(s2)) {
      if (end_[static_cast<size_t>(trie)]) return kDead;  // a listed name, closed
    } else if (const auto it = children_[static_cast<size_t>(trie)].find(byte);
               it != children_[static_cast<size_t>(trie)].end()) {
      t2 = it->second;
    }
  }
  return Intern(t2, s2);
}

bool KeyExceptAutomaton::Accepts(int state) const {
  return state >= 0 && string_->IsAccepting(states_[static_cast<size_t>(state)].second);
}

}  // namespace llmq
