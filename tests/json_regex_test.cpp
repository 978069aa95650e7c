// JSON lexeme regexes (engine/structured/json_regex.h) and Regex's JSON-string mode: integer and
// number ranges equal an exact arithmetic comparison on every text in windows around the bounds
// and on random texts, number ranges accept only texts within them as validators read them
// (strtod's double) and all such texts of up to 15 significant digits, formats accept and refuse
// hand-written cases (dates' and times' fields and ipv4/ipv6 also equal independent checks: the
// fields' ranges, glibc's inet_pton).
#include "engine/structured/json_regex.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "engine/structured/regex.h"

namespace llmq {
namespace {

std::unique_ptr<Regex> Full(const std::string& pattern) {
  std::unique_ptr<Regex> r;
  const Status st = Regex::Compile(pattern, Regex::Mode::kFull, &r);
  EXPECT_TRUE(st.ok()) << pattern << ": " << st.message();
  return r;
}

using Rng = std::mt19937_64;  // fixed seeds: the same texts every run

std::string Text(__int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  unsigned __int128 m = neg ? -static_cast<unsigned __int128>(v) : v;
  std::string s;
  for (; m > 0; m /= 10) s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(m % 10)));
  return neg ? "-" + s : s;
}

// ---- integers ----

void CheckIntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi, Rng& rng) {
  std::string p;
  ASSERT_TRUE(IntegerRangeRegex(lo, hi, &p).ok());
  const auto r = Full(p);
  ASSERT_TRUE(r);
  const std::string name =
      "[" + (lo ? Text(*lo) : "-inf") + ", " + (hi ? Text(*hi) : "inf") + "] " + p;
  auto in = [&](__int128 v) { return (!lo || v >= *lo) && (!hi || v <= *hi); };
  std::vector<__int128> values;
  for (__int128 center : {__int128{0}, __int128{lo.value_or(0)}, __int128{hi.value_or(0)}})
    for (int d = -300; d <= 300; ++d) values.push_back(center + d);
  for (int i = 0; i < 300; ++i) {
    const int digits = 1 + static_cast<int>(rng() % 20);
    __int128 v = 0;
    for (int k = 0; k < digits; ++k) v = v * 10 + static_cast<int>(rng() % 10);
    values.push_back(rng() % 2 ? v : -v);
    if (lo && hi) {  // between the bounds
      const auto width = static_cast<unsigned __int128>(static_cast<__int128>(*hi) - *lo + 1);
      values.push_back(*lo + static_cast<__int128>(rng() % width));
    }
  }
  for (__int128 v : values) {
    ASSERT_EQ(r->Matches(Text(v)), in(v)) << name << " on " << Text(v);
    if (v != 0) {  // leading zeros and '+' are not JSON
      const std::string t = Text(v);
      const std::string zero = t[0] == '-' ? "-0" + t.substr(1) : "0" + t;
      ASSERT_FALSE(r->Matches(zero)) << name << " on " << zero;
      if (v > 0) {
        ASSERT_FALSE(r->Matches("+" + t)) << name;
      }
    }
    ASSERT_FALSE(r->Matches(Text(v) + ".0")) << name;
    ASSERT_FALSE(r->Matches(Text(v) + "e0")) << name;
  }
  EXPECT_EQ(r->Matches("-0"), in(0)) << name;
  for (const char* bad : {"", "-", "00", "-00", " 1", "1 ", "0x1"})
    EXPECT_FALSE(r->Matches(bad)) << name << " on \"" << bad << "\"";
}

TEST(JsonRegexTest, IntegerRangesEqualTheComparison) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  using O = std::optional<int64_t>;
  const std::vector<std::pair<O, O>> ranges = {
      {{}, {}},     {0, {}},    {{}, 0},      {1, {}},          {{}, -1},
      {-5, 5},      {0, 0},     {7, 7},       {-7, -7},         {10, 99},
      {9, 100},     {-100, -9}, {-123, 4567}, {1, 1000000},     {37, 12345},
      {-999, -100}, {42, {}},   {{}, -42},    {999, 1000},      {123456789012345, 123456789099999},
      {kMin, kMax}, {kMin, {}}, {{}, kMax},   {kMax - 5, kMax}, {kMin, kMin + 5},
      {kMin, 0},    {-1, kMax}, {1, kMax},    {{}, kMin},       {kMax, {}},
  };
  Rng rng(24);
  for (const auto& [lo, hi] : ranges) CheckIntegerRange(lo, hi, rng);
  for (int i = 0; i < 150; ++i) {  // random bounds of random magnitudes
    auto bound = [&]() -> O {
      if (rng() % 6 == 0) return std::nullopt;
      const auto v = static_cast<int64_t>(rng() >> (1 + rng() % 63));
      return rng() % 2 ? v : -v;
    };
    O lo = bound(), hi = bound();
    if (lo && hi && *lo > *hi) std::swap(lo, hi);
    CheckIntegerRange(lo, hi, rng);
  }
}

TEST(JsonRegexTest, IntegerRangeSizeGrowsWithDigitsAndBadRangesAreRefused) {
  std::string p;
  ASSERT_TRUE(IntegerRangeRegex(std::numeric_limits<int64_t>::min() + 1234567,
                                std::numeric_limits<int64_t>::max() - 7654321, &p)
                  .ok());
  EXPECT_LT(p.size(), 4000u) << p;
  EXPECT_EQ(IntegerRangeRegex(5, 4, &p).code(), Status::Code::kInvalidArgument);
}

// ---- numbers ----

// A number text without exponent (or a bound) as n / 10^s.
struct Scaled {
  __int128 n = 0;
  int s = 0;
};
Scaled Parse(const std::string& t) {
  Scaled v;
  bool neg = false, frac = false;
  for (char c : t) {
    if (c == '-') {
      neg = true;
    } else if (c == '.') {
      frac = true;
    } else {
      v.n = v.n * 10 + (c - '0');
      v.s += frac;
    }
  }
  if (neg) v.n = -v.n;
  return v;
}
int Compare(Scaled a, Scaled b) {
  for (; a.s < b.s; ++a.s) a.n *= 10;
  for (; b.s < a.s; ++b.s) b.n *= 10;
  return (a.n > b.n) - (a.n < b.n);
}
// n / 10^s with exactly s fraction digits.
std::string Format(__int128 n, int s) {
  std::string t = Text(n < 0 ? -n : n);
  if (s > 0) {
    if (t.size() <= static_cast<size_t>(s)) t.insert(0, static_cast<size_t>(s) + 1 - t.size(), '0');
    t.insert(t.size() - static_cast<size_t>(s), ".");
  }
  return n < 0 ? "-" + t : t;
}

struct NumberRange {
  std::optional<std::string> lo;
  bool lx = false;
  std::optional<std::string> hi;
  bool hx = false;
};

std::string Name(const NumberRange& r) {
  return std::string(r.lx ? "(" : "[") + r.lo.value_or("-inf") + ", " + r.hi.value_or("inf") +
         (r.hx ? ")" : "]");
}

void CheckNumberRange(const NumberRange& range, Rng& rng) {
  auto to_double = [](const std::optional<std::string>& s) -> std::optional<double> {
    if (!s) return std::nullopt;
    return std::strtod(s->c_str(), nullptr);
  };
  std::string p;
  const Status st =
      NumberRangeRegex(to_double(range.lo), range.lx, to_double(range.hi), range.hx, &p);
  ASSERT_TRUE(st.ok()) << Name(range) << ": " << st.message();
  const auto r = Full(p);
  ASSERT_TRUE(r);
  const std::string name = Name(range) + " " + p;
  auto in = [&](const std::string& t) {
    const Scaled v = Parse(t);
    if (range.lo) {
      const int c = Compare(v, Parse(*range.lo));
      if (c < 0 || (c == 0 && range.lx)) return false;
    }
    if (range.hi) {
      const int c = Compare(v, Parse(*range.hi));
      if (c > 0 || (c == 0 && range.hx)) return false;
    }
    return true;
  };
  std::vector<std::string> texts = {"0", "-0", "0.0", "-0.0", "0.000", "-0.00", "1", "-1"};
  for (int s = 0; s <= 3; ++s)  // a grid: -2100..2100 at four scales
    for (int n = -2100; n <= 2100; n += 1 + (s == 0 ? 0 : 2)) texts.push_back(Format(n, s));
  for (const auto& b : {range.lo, range.hi}) {  // windows around the bounds, at finer scales
    if (!b) continue;
    const Scaled v = Parse(*b);
    for (int s = std::max(0, v.s - 1); s <= v.s + 3; ++s) {
      Scaled at = v;
      for (; at.s < s; ++at.s) at.n *= 10;
      for (; at.s > s; --at.s) at.n /= 10;
      for (int k = -25; k <= 25; ++k) {
        texts.push_back(Format(at.n + k, s));
        texts.push_back(Format((at.n + k) * 10, s + 1));  // a trailing zero
      }
    }
  }
  for (int i = 0; i < 500; ++i) {
    const int s = static_cast<int>(rng() % 5);
    const __int128 n = static_cast<__int128>(rng() % 100000000) - 50000000;
    texts.push_back(Format(n >> (rng() % 24), s));
  }
  for (const std::string& t : texts) ASSERT_EQ(r->Matches(t), in(t)) << name << " on " << t;
  for (const char* bad : {"", "-", "01", "-01", "+1", "1.", ".5", "1.e5", "00.5", " 1", "--1"})
    EXPECT_FALSE(r->Matches(bad)) << name << " on \"" << bad << "\"";
}

TEST(JsonRegexTest, NumberRangesEqualTheExactComparison) {
  using S = std::optional<std::string>;
  const std::vector<NumberRange> ranges = {
      {S(), false, S(), false},
      {"0", false, S(), false},
      {"0", true, S(), false},
      {S(), false, "0", false},
      {S(), false, "0", true},
      {"1", false, "100", false},
      {"0.5", false, "1.5", false},
      {"0.5", true, "1.5", true},
      {"-90", false, "90", false},
      {"-180", false, "180", true},
      {"100.5", false, S(), false},
      {S(), false, "100.5", true},
      {"-0.25", false, "0.25", false},
      {"1.5", false, "1.5", false},
      {"0.001", false, "0.002", true},
      {"-12.345", false, "-12.3", false},
      {"0.1", false, "0.3", true},
      {"-1", false, "0", true},
      {"-0.5", false, S(), false},
      {"2.75", false, "1000", false},
      {"0", false, "0", false},
      {"-0.001", true, "0.001", true},
      {"123.456", false, "123.457", false},
      {"99.99", true, "100.01", false},
      {"-100.5", false, "-99.25", true},
      {S(), false, "-0.75", false},
      {"0.05", false, "0.5", false},
      {"9.99", false, "10", false},
  };
  Rng rng(24);
  for (const NumberRange& r : ranges) CheckNumberRange(r, rng);
  for (int i = 0; i < 120; ++i) {  // random short decimals
    auto bound = [&]() -> S {
      if (rng() % 5 == 0) return std::nullopt;
      return Format(static_cast<__int128>(rng() % 40001) - 20000, static_cast<int>(rng() % 4));
    };
    NumberRange r{bound(), rng() % 2 == 0, bound(), rng() % 2 == 0};
    if (r.lo && r.hi) {
      const int c = Compare(Parse(*r.lo), Parse(*r.hi));
      if (c > 0) std::swap(r.lo, r.hi);
      if (c == 0) r.lx = r.hx = false;
    }
    CheckNumberRange(r, rng);
  }
}

// ---- numbers as a validator reads them ----

// A number text's significant digits (no exponent): between its first and last non-zero digit.
size_t Significant(const std::string& t) {
  std::string d;
  for (char c : t)
    if (c >= '0' && c <= '9') d += c;
  const size_t first = d.find_first_not_of('0');
  if (first == std::string::npos) return 0;
  return d.find_last_not_of('0') - first + 1;
}

// The shortest decimal of `v` without exponent (std::to_chars: it reads back as v).
std::string Shortest(double v) {
  char buf[512];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, res.ptr);
}

struct DoubleRange {
  std::optional<double> lo;
  bool lx = false;
  std::optional<double> hi;
  bool hx = false;
};

// Every text the range's regex accepts is in the range as Ajv and Python's jsonschema read it (the
// text rounded to the nearest double by strtod, then compared), and every text of 15 significant
// digits or fewer and at most 40 after the point is accepted exactly when it is in it. Texts: each
// bound's neighbouring doubles and decimals of 16 to 36 digits between and around them (within half
// a double's spacing of a bound, where the exact decimal and the double disagree), and 0.000...1
// with 38 to 400 zeros.
void CheckDoubleRange(const DoubleRange& range, Rng& rng) {
  std::string p;
  const Status st = NumberRangeRegex(range.lo, range.lx, range.hi, range.hx, &p);
  const std::string name = std::string(range.lx ? "(" : "[") +
                           (range.lo ? Shortest(*range.lo) : "-inf") + ", " +
                           (range.hi ? Shortest(*range.hi) : "inf") + (range.hx ? ")" : "]");
  ASSERT_TRUE(st.ok()) << name << ": " << st.message();
  const auto r = Full(p);
  ASSERT_TRUE(r);
  auto in = [&](const std::string& t) {
    const double v = std::strtod(t.c_str(), nullptr);
    if (range.lo && (v < *range.lo || (v == *range.lo && range.lx))) return false;
    if (range.hi && (v > *range.hi || (v == *range.hi && range.hx))) return false;
    return true;
  };
  std::vector<std::string> texts;
  for (int z : {38, 39, 40, 41, 45, 300, 322, 323, 324, 330, 400}) {
    texts.push_back("0." + std::string(static_cast<size_t>(z), '0') + "1");
    texts.push_back("-0." + std::string(static_cast<size_t>(z), '0') + "1");
  }
  for (const auto& b : {range.lo, range.hi}) {
    if (!b) continue;
    double at = *b;
    for (int i = 0; i < 3; ++i) at = std::nextafter(at, -HUGE_VAL);
    for (int k = -3; k <= 3; ++k, at = std::nextafter(at, HUGE_VAL)) {
      const std::string base = Shortest(at);
      texts.push_back(base);
      const Scaled v = Parse(base);
      const int digits = static_cast<int>(Text(v.n < 0 ? -v.n : v.n).size());
      for (int extra = 1; extra <= 24 && digits + extra <= 36; ++extra) {
        __int128 n = v.n, unit = 1;
        for (int e = 0; e < extra; ++e) n *= 10;
        for (int e = 0; e < std::min(extra, 15); ++e) unit *= 10;
        for (const __int128 d :
             {__int128{0}, __int128{1}, __int128{-1}, __int128{5}, __int128{-5}, unit / 2,
              -unit / 2, unit / 2 + 1, -unit / 2 - 1,
              static_cast<__int128>(rng() % static_cast<uint64_t>(unit)) - unit / 2})
          texts.push_back(Format(n + d, v.s + extra));
      }
    }
  }
  for (const std::string& t : texts) {
    const bool matched = r->Matches(t);
    if (matched) {
      EXPECT_TRUE(in(t)) << name << " accepts " << t << ", out of it as a double";
    }
    const size_t point = t.find('.');
    const size_t after = point == std::string::npos ? 0 : t.size() - point - 1;
    if (Significant(t) <= 15 && after <= 40) {
      EXPECT_EQ(matched, in(t)) << name << " on " << t;
    }
  }
}

TEST(JsonRegexTest, NumberRangesAgreeWithTheDoubleComparison) {
  // Bounds of up to 15 significant digits, and ones whose neighbours need 17.
  const std::vector<double> bounds = {
      0,     0.1,   -0.1, 0.3, 2.5, -7.25, 1e-5, 1e-38, 1e20, 123456789.125, 99999999999999.9,
      -1e15, 0.001, 0.7};
  Rng rng(2412);
  for (const double b : bounds) {
    for (const bool x : {false, true}) {
      CheckDoubleRange({b, x, std::nullopt, false}, rng);
      CheckDoubleRange({std::nullopt, false, b, x}, rng);
    }
  }
  for (int i = 0; i < 40; ++i) {
    double a = bounds[rng() % bounds.size()], b = bounds[rng() % bounds.size()];
    if (a == b) continue;
    if (a > b) std::swap(a, b);
    CheckDoubleRange({a, rng() % 2 == 0, b, rng() % 2 == 0}, rng);
  }
  // The texts that are the bound itself as a double, though their decimal is past it.
  std::string p;
  ASSERT_TRUE(NumberRangeRegex(0.1, true, {}, false, &p).ok());
  EXPECT_FALSE(Full(p)->Matches("0.10000000000000000001"));
  EXPECT_TRUE(Full(p)->Matches("0.10000000000000002"));
  ASSERT_TRUE(NumberRangeRegex(0.0, true, {}, false, &p).ok());
  EXPECT_FALSE(Full(p)->Matches("0." + std::string(400, '0') + "1"));
  EXPECT_TRUE(Full(p)->Matches("0." + std::string(39, '0') + "1"));
  ASSERT_TRUE(NumberRangeRegex({}, false, -2.5, true, &p).ok());
  EXPECT_FALSE(Full(p)->Matches("-2.5000000000000000001"));
  EXPECT_TRUE(Full(p)->Matches("-2.5000000000000005"));
}

TEST(JsonRegexTest, NumberExponentsOnlyWhereTheRangeHoldsTheWholeSide) {
  struct Case {
    std::optional<double> lo;
    bool lx;
    std::optional<double> hi;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {{}, false, {}, {"1e5", "-2.5E-3", "0e0", "-0.5e+10", "12"}, {"1e", "e5", "1E+"}},
      {0.0, false, {}, {"1e5", "0e0", "2.5E-300", "0"}, {"-1e5", "-0.1"}},
      {-90.0, false, {}, {"1e300", "-90", "-89.9"}, {"-1e1", "-90.01"}},
      {0.0, true, {}, {"0.1", "1000"}, {"1e5", "0", "-0"}},
      {{}, false, 100.0, {"-1e300", "100", "-0"}, {"1e1", "100.1"}},
      {1.0, false, 2.0, {"1", "1.5"}, {"1e0", "15e-1"}},
  };
  for (const Case& c : cases) {
    std::string p;
    ASSERT_TRUE(NumberRangeRegex(c.lo, c.lx, c.hi, false, &p).ok());
    const auto r = Full(p);
    for (const std::string& t : c.yes) EXPECT_TRUE(r->Matches(t)) << p << " on " << t;
    for (const std::string& t : c.no) EXPECT_FALSE(r->Matches(t)) << p << " on " << t;
  }
}

TEST(JsonRegexTest, NumberBoundsThatCannotBeEnforcedAreRefused) {
  std::string p;
  EXPECT_EQ(NumberRangeRegex(2, false, 1, false, &p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NumberRangeRegex(1, true, 1, false, &p).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(NumberRangeRegex(std::numeric_limits<double>::quiet_NaN(), false, {}, false, &p).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(NumberRangeRegex({}, false, std::numeric_limits<double>::infinity(), false, &p).code(),
            Status::Code::kInvalidArgument);
  const Status st = NumberRangeRegex(0.1 + 0.2, false, {}, false, &p);  // 0.30000000000000004
  EXPECT_EQ(st.code(), Status::Code::kUnsupported);
  EXPECT_NE(st.message().find("minimum"), std::string::npos) << st.message();
  EXPECT_EQ(NumberRangeRegex({}, false, 1e50, false, &p).code(), Status::Code::kUnsupported);
  EXPECT_EQ(NumberRangeRegex(1e-50, false, {}, false, &p).code(), Status::Code::kUnsupported);
  EXPECT_TRUE(NumberRangeRegex(-1e20, false, 1e-20, false, &p).ok());
  const auto r = Full(p);
  EXPECT_TRUE(r->Matches("-100000000000000000000"));
  EXPECT_FALSE(r->Matches("-100000000000000000000.1"));
  EXPECT_TRUE(r->Matches("0.00000000000000000001"));
  EXPECT_FALSE(r->Matches("0.000000000000000000011"));
}

// ---- formats ----

std::unique_ptr<Regex> Format(std::string_view format) {
  std::string p;
  const Status st = FormatRegex(format, &p);
  EXPECT_TRUE(st.ok()) << format << ": " << st.message();
  return Full(p);
}

TEST(JsonRegexTest, FormatsAcceptAndRefuseByHand) {
  struct Case {
    const char* format;
    std::vector<std::string> valid, invalid;
  };
  const std::vector<Case> cases = {
      {"date",
       {"1963-06-19", "2020-01-31", "2000-12-01", "0000-01-01"},
       {"06/19/1963", "2013-350", "1998-1-20", "1998-01-1", "1998-13-01", "1998-00-10",
        "1998-01-32", "1998-01-00", "2020-01-31T00:00:00Z", "１９６３-06-19", ""}},
      {"time",
       {"08:30:06Z", "23:59:60Z", "08:30:06.283185Z", "08:30:06+00:20", "08:30:06-08:00",
        "08:30:06z", "00:00:00.1+23:59"},
       {"08:30:06", "24:00:00Z", "08:60:00Z", "08:30:61Z", "8:30:06Z", "08:30:06 PST",
        "08:30:06+24:00", "08:30:06+00:60", "08:30:06.Z", "01:01:01,1111Z", "12:00:00+0100"}},
      {"date-time",
       {"1963-06-19T08:30:06.283185Z", "1963-06-19T08:30:06Z", "1937-01-01T12:00:27.87+00:20",
        "1990-12-31T15:59:50.123-08:00", "1963-06-19t08:30:06.283185z", "1998-12-31T23:59:60Z"},
       {"1990-02-31T15:59:60.123-08:00x", "1963-06-19T08:30:06.283185", "06/19/1963 08:30:06 PST",
        "2013-350T01:01:01", "1963-06-19 08:30:06Z", "1963-06-1T08:30:06Z"}},
      {"duration",
       {"P4DT12H30M5S", "P4Y", "PT0S", "P0D", "P1M", "PT1M", "PT36H", "P1Y2M3DT4H5M6S", "P2W",
        "P1D", "PT1H30M"},
       {"PT1D", "P", "PT", "P1YT", "P2D1Y", "P1D2H", "P2S", "4DT12H30M5S", "P1Y2W", "PT1.5S", "P1",
        "p1D", "P1W1D"}},
      {"email",
       {"joe.bloggs@example.com", "te~st@example.com", "~test@example.com", "test~@example.com",
        "te.s.t@example.com", "a@b", "first+tag@mail.example.co.uk", "x@xn--bcher-kva.ch"},
       {"2962", ".test@example.com", "test.@example.com", "te..st@example.com", "a@b..c",
        "a b@example.com", "@example.com", "a@", "a@-b.com", "a@b-.com", "a@@b"}},
      {"hostname",
       {"www.example.com", "xn--4gbwdl.xn--wgbh1c", "a", "1host", "hostname-with-hyphen",
        std::string(63, 'a') + ".com", "a.b.c.d.e"},
       {"-a-host-name-that-starts-with--", "not_a_valid_host_name", "a.", ".a", "a..b", "host-",
        std::string(64, 'a') + ".com", "", "a b", "a\u00e9"}},
      {"ipv4",
       {"192.168.0.1", "0.0.0.0", "255.255.255.255", "87.10.0.1", "1.2.3.4"},
       {"127.0.0.0.1", "256.256.256.256", "127.0", "0x7f000001", "192.168.1.0/24", "087.10.0.1",
        "01.2.3.4", "1.2.3.", "1..2.3", "", " 1.2.3.4"}},
      {"ipv6",
       {"::1", "::", "::42:ff:1", "d6::", "1:d6::42", "1::d6:192.168.0.1", "::ffff:192.168.0.1",
        "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4", "FFFF::ffff",
        "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "fe80::0202:b3ff:fe1e:8329", "0:0:0:0:0:0:0:0"},
       {"12345::", "::abcef", "1:1:1:1:1:1:1:1:1", "::laptop", ":2:3:4:5:6:7:8", "1:2:3:4:5:6:7:",
        "1::2::3", "1:::2", "fe80::1%eth0", "::1.2.3", "::256.2.3.4", "1:2:3:4:5:6:7:1.2.3.4",
        "1:2:3:4:5:6:7:8:9", " ::1", "", ":", "1:2:3:4:5:6:7", "::01.2.3.4"}},
      {"uuid",
       {"2EB8AA08-AA98-11EA-B4AA-73B441D16380", "2eb8aa08-aa98-11ea-b4aa-73b441d16380",
        "00000000-0000-0000-0000-000000000000", "2eb8aa08-AA98-11ea-B4Aa-73B441D16380"},
       {"2eb8aa08-aa98-11ea-b4aa-73b441d1638", "2eb8aa08-aa98-11ea-b4ga-73b441d16380",
        "2eb8aa08aa9811eab4aa73b441d16380", "2eb8aa08-aa98-11eab4aa-73b441d16380",
        "{2eb8aa08-aa98-11ea-b4aa-73b441d16380}", "2eb8aa-08aa98-11ea-b4aa73b441d16380"}},
      {"uri",
       {"http://foo.bar/?baz=qux#quux", "http://foo.com/blah_(wiki)#cite-1",
        "mailto:John.Doe@example.com", "urn:oasis:names:specification:docbook:dtd:xml:4.1.2",
        "http://[2001:db8::7]/c=GB?x=%20", "tel:+1-816-555-1212",
        "ldap://[2001:db8::7]/c=GB?objectClass?one", "a:"},
       {"//foo.bar/?baz=qux#quux", "/abc", "\\\\WINDOWS\\fileshare", "abc",
        "http:// shouldfail.com", ":// should fail", "http://foo.bar/%zz", "1http://x",
        "http://\u00e9.com"}},
      {"uri-reference",
       {"http://foo.bar/?baz=qux#quux", "//foo.bar/?baz=qux#quux", "/abc", "#fragment", "", "?x=1",
        "a%20b"},
       {"\\\\WINDOWS\\filesystem", "#frag\\ment", "a b", "%2", "\u00e9", "://", ":a/b"}},
      {"iri",
       {"http://\u0192\u00f8\u00f8.\u00df\u00e5r/"
        "?\u2202\u00e9\u0153=\u03c0\u00eex#\u03c0\u00ee\u00fcx",
        "http://\u0192\u00f8\u00f8.com/blah_(w\u00eek\u00efp\u00e9di\u00e5)_blah#\u00dfit\u00e9-1"},
       {"/abc", "http:// \u0192\u00f8\u00f8.com", "\u00e9"}},
      {"iri-reference",
       {"\u00e9", "//\u0192\u00f8\u00f8.\u00df\u00e5r/", "#\u0192r\u00e4g"},
       {"\\\\WINDOWS\\fil\u00eb\u00df\u00e5r\u00e9", "a b"}},
      {"json-pointer",
       {"", "/", "/foo/bar~0/baz~1/%a", "/foo/0", "/g|h", "/i\\\\j", "/k\\\"l", "/ ", "/m~0n",
        "/foo//bar", "/\\n", "/\\u001f", "/\u00e9"},
       {"#", "#/", "/foo/bar~", "/~2", "/~-1", "/~~", "a", "0", "a/a", "/\\", "/\"", "/\n",
        "/\\u0041"}},
      {"relative-json-pointer",
       {"1", "0/foo/bar", "2/0/baz/1/zip", "0#", "1/", "120/foo/bar"},
       {"/foo/bar", "-1/foo/bar", "+1/foo/bar", "0##", "01/a", "01#", "", "1#/"}},
  };
  for (const Case& c : cases) {
    const auto r = Format(c.format);
    ASSERT_TRUE(r) << c.format;
    for (const std::string& t : c.valid) EXPECT_TRUE(r->Matches(t)) << c.format << ": " << t;
    for (const std::string& t : c.invalid) EXPECT_FALSE(r->Matches(t)) << c.format << ": " << t;
  }
  std::string p;
  EXPECT_EQ(FormatRegex("regex", &p).code(), Status::Code::kUnsupported);
  EXPECT_EQ(FormatRegex("uri-template", &p).code(), Status::Code::kUnsupported);
  EXPECT_EQ(FormatRegex("no-such-format", &p).code(), Status::Code::kNotFound);
  EXPECT_EQ(FormatRegex("", &p).code(), Status::Code::kNotFound);
}

TEST(JsonRegexTest, DateAndTimeFieldsEqualTheirRanges) {
  const auto date = Format("date");
  const auto time = Format("time");
  char buf[32];
  for (int a = 0; a < 100; ++a)
    for (int b = 0; b < 100; ++b) {
      for (const int y : {1900, 2000, 2023, 2024, 2100, 2400}) {  // the calendar is chrono's
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", y, a, b);
        const bool ok = a >= 1 && a <= 12 && b >= 1 &&
                        std::chrono::year_month_day(std::chrono::year(y),
                                                    std::chrono::month(static_cast<unsigned>(a)),
                                                    std::chrono::day(static_cast<unsigned>(b)))
                            .ok();
        ASSERT_EQ(date->Matches(buf), ok) << buf;
      }
      std::snprintf(buf, sizeof buf, "%02d:%02d:%02dZ", a % 30, b, a);
      ASSERT_EQ(time->Matches(buf), a % 30 <= 23 && b <= 59 && a <= 60) << buf;
      std::snprintf(buf, sizeof buf, "00:00:00+%02d:%02d", a, b);
      ASSERT_EQ(time->Matches(buf), a <= 23 && b <= 59) << buf;
    }
}

// Random texts built from address pieces: ipv4 and ipv6 equal glibc's inet_pton.
TEST(JsonRegexTest, IpAddressesEqualInetPton) {
  const auto v4 = Format("ipv4");
  const auto v6 = Format("ipv6");
  const std::vector<std::string> pieces = {
      "0", "1",    "00",    "01", "9", "25", "255", "256", "199", "ff",      "FFFF",
      "a", "abcd", "12345", ":",  ":", ":",  "::",  ".",   ".",   "1.2.3.4", "g"};
  Rng rng(24);
  unsigned char buf[16];
  int valid4 = 0, valid6 = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) t += pieces[rng() % pieces.size()];
    const bool want4 = inet_pton(AF_INET, t.c_str(), buf) == 1;
    const bool want6 = inet_pton(AF_INET6, t.c_str(), buf) == 1;
    valid4 += want4;
    valid6 += want6;
    ASSERT_EQ(v4->Matches(t), want4) << t;
    ASSERT_EQ(v6->Matches(t), want6) << t;
  }
  EXPECT_GT(valid4, 20);
  EXPECT_GT(valid6, 500);
}

}  // namespace
}  // namespace llmq
