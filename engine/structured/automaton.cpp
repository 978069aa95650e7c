#include "engine/structured/automaton.h"

#include "engine/structured/regex.h"

#include <algorithm>

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
  const Status st = Regex::Compile(kStringRegex, Regex::Mode::kFull, &string_);
  (void)st;  // a fixed pattern: compiles
}

KeyExceptAutomaton::~KeyExceptAutomaton() = default;

const char* const KeyExceptAutomaton::kStringRegex =
    "\"(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\bfnrt]|\\\\u00(?:0[0-7bef]|1[0-9a-f]))*\"";

int KeyExceptAutomaton::WithoutNames(int state) {
  if (state < 0) return kDead;
  return Intern(kOut, states_[static_cast<size_t>(state)].second);
}

std::string KeyExceptAutomaton::StringStateKey(int state) const {
  return state < 0 ? "dead" : string_->StateKey(states_[static_cast<size_t>(state)].second);
}

std::vector<std::string> KeyExceptAutomaton::ClosingsOnNames(int state) const {
  std::vector<std::string> out;
  if (state < 0) return out;
  const int trie = states_[static_cast<size_t>(state)].first;
  if (trie == kOut) return out;
  // Each name's bytes left from here (all of it, after the opening quote, before it), then '"'.
  std::vector<std::pair<int, std::string>> stack = {
      {trie == kBefore ? 0 : trie, trie == kBefore ? "\"" : ""}};
  while (!stack.empty()) {
    auto [at, text] = std::move(stack.back());
    stack.pop_back();
    if (end_[static_cast<size_t>(at)]) out.push_back(text + '"');
    for (const auto& [b, child] : children_[static_cast<size_t>(at)])
      stack.emplace_back(child, text + static_cast<char>(b));
  }
  return out;
}

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

std::string KeyExceptAutomaton::StateKey(int state) const {
  if (state < 0) return "dead";
  return std::to_string(states_[static_cast<size_t>(state)].first) + "/" +
         string_->StateKey(states_[static_cast<size_t>(state)].second);
}

bool KeyExceptAutomaton::Accepts(int state) const {
  return state >= 0 && string_->IsAccepting(states_[static_cast<size_t>(state)].second);
}

}  // namespace llmq

namespace llmq {

int StringLengthAutomaton::Next(int state, uint8_t b) {
  if (state < 0) return kDead;
  // Whether b is one of `set`: the one-letter escapes, a surrogate's second hex digit (high
  // D8-DB, low DC-DF).
  const auto in = [b](std::string_view set) {
    return set.find(static_cast<char>(b)) != std::string_view::npos;
  };
  const int64_t n = Count(state);
  const bool hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
  const bool cont = b >= 0x80 && b <= 0xBF;
  // A character starts only when the count allows one more; it is counted when it starts.
  const auto start = [&](int sub) { return max_ >= 0 && n + 1 > max_ ? kDead : Pack(n + 1, sub); };
  switch (Sub(state)) {
    case kBefore:
      return b == '"' ? Pack(0, kBetween) : kDead;
    case kBetween:
      if (b == '"') return n >= min_ ? Pack(n, kClosed) : kDead;
      if (b == '\\') return start(kEscape);
      if (b < 0x20) return kDead;
      if (b < 0x80) return start(kBetween);
      if (b >= 0xC2 && b <= 0xDF) return start(kCont1);
      if (b == 0xE0) return start(kCont2E0);
      if (b == 0xED) return start(kCont2ED);
      if (b >= 0xE1 && b <= 0xEF) return start(kCont2);
      if (b == 0xF0) return start(kCont3F0);
      if (b >= 0xF1 && b <= 0xF3) return start(kCont3);
      if (b == 0xF4) return start(kCont3F4);
      return kDead;
    case kEscape:
      if (b == 'u') return Pack(n, kHex0);
      return in("\"\\/bfnrt") ? Pack(n, kBetween) : kDead;
    case kHex0:
      if (b == 'd' || b == 'D') return Pack(n, kHexD1);
      return hex ? Pack(n, kHex1) : kDead;
    case kHexD1:  // D8-DB: a high surrogate; DC-DF: a low one, lone
      if (in("89abAB")) return Pack(n, kHighHex2);
      if (in("cdefCDEF")) return kDead;
      return hex ? Pack(n, kHex2) : kDead;
    case kHex1:
    case kHex2:
      return hex ? Pack(n, Sub(state) + 1) : kDead;
    case kHex3:
      return hex ? Pack(n, kBetween) : kDead;
    case kHighHex2:
      return hex ? Pack(n, kHighHex3) : kDead;
    case kHighHex3:
      return hex ? Pack(n, kAfterHigh) : kDead;
    // After a high surrogate: only its low surrogate, which adds nothing to the count.
    case kAfterHigh:
      return b == '\\' ? Pack(n, kEscapeAfterHigh) : kDead;
    case kEscapeAfterHigh:
      return b == 'u' ? Pack(n, kHexAfterHigh0) : kDead;
    case kHexAfterHigh0:
      return b == 'd' || b == 'D' ? Pack(n, kHexAfterHigh1) : kDead;
    case kHexAfterHigh1:
      return in("cdefCDEF") ? Pack(n, kHex2) : kDead;
    case kCont1:
      return cont ? Pack(n, kBetween) : kDead;
    case kCont2:
      return cont ? Pack(n, kCont1) : kDead;
    case kCont2E0:
      return b >= 0xA0 && b <= 0xBF ? Pack(n, kCont1) : kDead;
    case kCont2ED:
      return b >= 0x80 && b <= 0x9F ? Pack(n, kCont1) : kDead;
    case kCont3:
      return cont ? Pack(n, kCont2) : kDead;
    case kCont3F0:
      return b >= 0x90 && b <= 0xBF ? Pack(n, kCont2) : kDead;
    case kCont3F4:
      return b >= 0x80 && b <= 0x8F ? Pack(n, kCont2) : kDead;
    default:
      return kDead;  // closed: nothing follows
  }
}

int StringLengthAutomaton::MaskClass(int state, int horizon) const {
  if (state < 0 || Sub(state) == kBefore || Sub(state) == kClosed) return state;
  const int64_t n = Count(state);
  if (max_ >= 0 && max_ - n <= horizon) return state;  // near max: exact
  if (n >= min_) return Pack(min_, Sub(state));
  if (min_ - n > horizon) return Pack(min_ - horizon - 1, Sub(state));
  return state;
}

}  // namespace llmq
