#include "engine/tools/corpus.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_set>

namespace llmq {
namespace {

// All randomness comes from this generator (not <random>'s distributions, whose output is
// implementation-defined), so the text is identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  bool Chance(double p) { return Unit() < p; }

 private:
  uint64_t s_;
};

// Ranks 0..n-1 drawn with probability proportional to 1 / (rank + 2).
class Zipf {
 public:
  explicit Zipf(size_t n) : cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / static_cast<double>(i + 2));
  }
  size_t Draw(Rng& rng) const {
    const double u = rng.Unit() * cdf_.back();
    return std::min<size_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(),
                            cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

constexpr std::string_view kCommonWords[] = {
    "the",      "of",       "and",      "to",       "a",       "in",       "is",       "it",
    "you",      "that",     "he",       "was",      "for",     "on",       "are",      "with",
    "as",       "I",        "his",      "they",     "be",      "at",       "one",      "have",
    "this",     "from",     "or",       "had",      "by",      "hot",      "word",     "but",
    "what",     "some",     "we",       "can",      "out",     "other",    "were",     "all",
    "there",    "when",     "up",       "use",      "your",    "how",      "said",     "an",
    "each",     "she",      "which",    "do",       "their",   "time",     "if",       "will",
    "way",      "about",    "many",     "then",     "them",    "write",    "would",    "like",
    "so",       "these",    "her",      "long",     "make",    "thing",    "see",      "him",
    "two",      "has",      "look",     "more",     "day",     "could",    "go",       "come",
    "did",      "number",   "sound",    "no",       "most",    "people",   "my",       "over",
    "know",     "water",    "than",     "call",     "first",   "who",      "may",      "down",
    "side",     "been",     "now",      "find",     "any",     "new",      "work",     "part",
    "take",     "get",      "place",    "made",     "live",    "where",    "after",    "back",
    "little",   "only",     "round",    "man",      "year",    "came",     "show",     "every",
    "good",     "me",       "give",     "our",      "under",   "name",     "very",     "through",
    "just",     "form",     "sentence", "great",    "think",   "say",      "help",     "low",
    "line",     "differ",   "turn",     "cause",    "much",    "mean",     "before",   "move",
    "right",    "boy",      "old",      "too",      "same",    "tell",     "does",     "set",
    "three",    "want",     "air",      "well",     "also",    "play",     "small",    "end",
    "put",      "home",     "read",     "hand",     "port",    "large",    "spell",    "add",
    "even",     "land",     "here",     "must",     "big",     "high",     "such",     "follow",
    "act",      "why",      "ask",      "men",      "change",  "went",     "light",    "kind",
    "off",      "need",     "house",    "picture",  "try",     "us",       "again",    "animal",
    "point",    "mother",   "world",    "near",     "build",   "self",     "earth",    "father",
    "head",     "stand",    "own",      "page",     "should",  "country",  "found",    "answer",
    "school",   "grow",     "study",    "still",    "learn",   "plant",    "cover",    "food",
    "sun",      "four",     "between",  "state",    "keep",    "eye",      "never",    "last",
    "let",      "thought",  "city",     "tree",     "cross",   "farm",     "hard",     "start",
    "might",    "story",    "saw",      "far",      "sea",     "draw",     "left",     "late",
    "run",      "while",    "press",    "close",    "night",   "real",     "life",     "few",
    "north",    "open",     "seem",     "together", "next",    "white",    "children", "begin",
    "got",      "walk",     "example",  "ease",     "paper",   "group",    "always",   "music",
    "those",    "both",     "mark",     "often",    "letter",  "until",    "mile",     "river",
    "car",      "feet",     "care",     "second",   "book",    "carry",    "took",     "science",
    "eat",      "room",     "friend",   "began",    "idea",    "fish",     "mountain", "stop",
    "once",     "base",     "hear",     "horse",    "cut",     "sure",     "watch",    "color",
    "face",     "wood",     "main",     "enough",   "plain",   "girl",     "usual",    "young",
    "ready",    "above",    "ever",     "red",      "list",    "though",   "feel",     "talk",
    "bird",     "soon",     "body",     "dog",      "family",  "direct",   "pose",     "leave",
    "song",     "measure",  "door",     "product",  "black",   "short",    "numeral",  "class",
    "wind",     "question", "happen",   "complete", "ship",    "area",     "half",     "rock",
    "order",    "fire",     "south",    "problem",  "piece",   "told",     "knew",     "pass",
    "since",    "top",      "whole",    "king",     "space",   "heard",    "best",     "hour",
    "better",   "true",     "during",   "hundred",  "five",    "remember", "step",     "early",
    "hold",     "west",     "ground",   "interest", "reach",   "fast",     "verb",     "sing",
    "listen",   "six",      "table",    "travel",   "less",    "morning",  "ten",      "simple",
    "several",  "vowel",    "toward",   "war",      "lay",     "against",  "pattern",  "slow",
    "center",   "love",     "person",   "money",    "serve",   "appear",   "road",     "map",
    "rain",     "rule",     "govern",   "pull",     "cold",    "notice",   "voice",    "unit",
    "power",    "town",     "fine",     "certain",  "fly",     "fall",     "lead",     "cry",
    "dark",     "machine",  "note",     "wait",     "plan",    "figure",   "star",     "box",
    "noun",     "field",    "rest",     "correct",  "able",    "pound",    "done",     "beauty",
    "drive",    "stood",    "contain",  "front",    "teach",   "week",     "final",    "gave",
    "green",    "oh",       "quick",    "develop",  "ocean",   "warm",     "free",     "minute",
    "strong",   "special",  "mind",     "behind",   "clear",   "tail",     "produce",  "fact",
    "street",   "inch",     "multiply", "nothing",  "course",  "stay",     "wheel",    "full",
    "force",    "blue",     "object",   "decide",   "surface", "deep",     "moon",     "island",
    "foot",     "system",   "busy",     "test",     "record",  "boat",     "common",   "gold",
    "possible", "plane",    "stead",    "dry",      "wonder",  "laugh",    "thousand", "ago",
    "ran",      "check",    "game",     "shape",    "equate",  "miss",     "brought",  "heat",
    "snow",     "tire",     "bring",    "yes",      "distant", "fill",     "east",     "paint",
    "language", "among",    "happy",    "cat",      "park",    "toy",
};

constexpr std::string_view kForeignWords[] = {
    "café",   "naïve", "résumé", "über",        "señor",    "façade",  "Zürich",
    "déjà",   "crème", "brûlée", "piñata",      "jalapeño", "São",     "Paulo",
    "Ελλάδα", "αλφα",  "Москва", "привет",      "東京",     "世界",    "日本",
    "中文",   "안녕",  "Kraków", "smörgåsbord", "Ægir",     "fjörður", "Straße",
};

constexpr std::string_view kOnsets[] = {"",   "b",  "c",  "d",  "f",  "g",  "h",  "j",  "k",  "l",
                                        "m",  "n",  "p",  "r",  "s",  "t",  "v",  "w",  "z",  "br",
                                        "cr", "dr", "fl", "gr", "pl", "st", "tr", "sh", "ch", "th",
                                        "sp", "sk", "sl", "bl", "cl", "gl", "pr", "qu", "wh", "y"};
constexpr std::string_view kNuclei[] = {"a",  "e",  "i",  "o",  "u",  "ai", "ea",
                                        "ee", "oo", "ou", "ie", "oa", "y",  "au"};
constexpr std::string_view kCodas[] = {"",   "",   "",   "n",  "r",  "s",  "t", "l",  "m",  "nd",
                                       "st", "ck", "ng", "rt", "sh", "th", "x", "ll", "mp", "nt"};

template <typename T, size_t N>
std::string_view Pick(Rng& rng, const T (&arr)[N]) {
  return arr[rng.Below(N)];
}

std::string PseudoWord(Rng& rng) {
  std::string w;
  const size_t syllables = 1 + rng.Below(4);
  for (size_t i = 0; i < syllables; ++i) {
    w += Pick(rng, kOnsets);
    w += Pick(rng, kNuclei);
    w += Pick(rng, kCodas);
  }
  return w;
}

std::string Number(Rng& rng) {
  switch (rng.Below(6)) {
    case 0:
      return std::to_string(1800 + rng.Below(230));  // a year
    case 1:
      return "$" + std::to_string(rng.Below(1000)) + "." + std::to_string(10 + rng.Below(90));
    case 2:
      return std::to_string(1 + rng.Below(12)) + ":" + std::to_string(10 + rng.Below(50));
    case 3:
      return std::to_string(rng.Below(101)) + "%";
    case 4:
      return std::to_string(rng.Below(100000));
    default:
      return std::to_string(rng.Below(10));
  }
}

std::string Capitalised(std::string w) {
  if (!w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
  return w;
}

}  // namespace

std::vector<std::string> GenerateCorpus(const CorpusOptions& opt) {
  Rng rng(opt.seed ^ 0x6C6C6D71636F7270ull);  // "llmqcorp"
  // Distinct pseudo-words, in generation order (rank = order, so the order is deterministic).
  std::vector<std::string> lexicon;
  std::unordered_set<std::string> seen;
  for (std::string_view w : kCommonWords) seen.emplace(w);
  for (size_t tries = 0; lexicon.size() < opt.num_pseudo_words && tries < 50 * opt.num_pseudo_words;
       ++tries) {
    std::string w = PseudoWord(rng);
    if (seen.insert(w).second) lexicon.push_back(std::move(w));
  }
  const Zipf common(std::size(kCommonWords));
  const Zipf pseudo(std::max<size_t>(lexicon.size(), 1));
  constexpr std::string_view kEnds[] = {".", ".", ".", ".", "!", "?", "...", ";"};

  std::vector<std::string> lines;
  lines.reserve(opt.num_sentences);
  for (size_t s = 0; s < opt.num_sentences; ++s) {
    std::string line;
    const size_t words = 4 + rng.Below(13);
    for (size_t i = 0; i < words; ++i) {
      std::string w;
      const double r = rng.Unit();
      if (r < 0.50) {
        w = kCommonWords[common.Draw(rng)];
      } else if (r < 0.93 && !lexicon.empty()) {
        w = lexicon[pseudo.Draw(rng)];
        if (rng.Chance(0.1)) w = Capitalised(w);  // a name
      } else if (r < 0.98) {
        w = Number(rng);
      } else {
        w = Pick(rng, kForeignWords);
      }
      if (i == 0) w = Capitalised(w);
      if (i > 0) line += ' ';
      if (rng.Chance(0.02)) w = "\"" + w + "\"";
      line += w;
      if (i + 1 < words && rng.Chance(0.08)) line += rng.Chance(0.8) ? "," : ":";
    }
    line += Pick(rng, kEnds);
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace llmq
