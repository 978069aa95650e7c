// A strict, small well-formedness check for the HTML llmq writes (the job report): it must parse
// as XML too. Checks: elements nest and close (or self-close), exactly one root element, attribute
// values quoted, text and attribute values hold '&' only as &amp; &lt; &gt; &quot; &#39; or a
// numeric reference and never a raw '<'; a leading <!DOCTYPE ...> is allowed. Returns "" when
// well-formed, else the first problem with its byte offset.
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace llmq::testing {

inline std::string XmlProblem(std::string_view s) {
  std::vector<std::string> open;
  int roots = 0;
  size_t i = 0;
  auto at = [&](const std::string& what) { return what + " at byte " + std::to_string(i); };
  auto entity_ok = [&](size_t p) {  // s[p] == '&'
    for (std::string_view e : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"})
      if (s.substr(p, e.size()) == e) return true;
    if (s.substr(p, 2) != "&#") return false;
    size_t q = p + 2;
    while (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) ++q;
    return q > p + 2 && q < s.size() && s[q] == ';';
  };
  auto is_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':';
  };
  if (s.substr(0, 9) == "<!DOCTYPE") {
    i = s.find('>');
    if (i == std::string_view::npos) return "unclosed DOCTYPE";
    ++i;
  }
  while (i < s.size()) {
    const char c = s[i];
    if (c == '&') {
      if (!entity_ok(i)) return at("a bare '&'");
      ++i;
      continue;
    }
    if (c != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(c)))
        return at("text outside the root");
      ++i;
      continue;
    }
    if (s.substr(i, 2) == "</") {
      size_t q = i + 2;
      while (q < s.size() && is_name(s[q])) ++q;
      const std::string name(s.substr(i + 2, q - i - 2));
      if (q >= s.size() || s[q] != '>') return at("a malformed end tag");
      if (open.empty() || open.back() != name)
        return at("</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">"));
      open.pop_back();
      i = q + 1;
      continue;
    }
    size_t q = i + 1;
    while (q < s.size() && is_name(s[q])) ++q;
    const std::string name(s.substr(i + 1, q - i - 1));
    if (name.empty()) return at("a '<' that starts no tag");
    for (;;) {  // attributes
      while (q < s.size() && std::isspace(static_cast<unsigned char>(s[q]))) ++q;
      if (q >= s.size()) return at("an unclosed tag <" + name);
      if (s[q] == '>' || s.substr(q, 2) == "/>") break;
      const size_t a = q;
      while (q < s.size() && is_name(s[q])) ++q;
      if (q == a || q + 1 >= s.size() || s[q] != '=' || s[q + 1] != '"')
        return at("an attribute without a quoted value in <" + name);
      q += 2;
      while (q < s.size() && s[q] != '"') {
        if (s[q] == '<') return at("a '<' in an attribute value of <" + name);
        if (s[q] == '&' && !entity_ok(q)) return at("a bare '&' in an attribute of <" + name);
        ++q;
      }
      if (q >= s.size()) return at("an unclosed attribute value in <" + name);
      ++q;
    }
    if (open.empty()) ++roots;
    if (roots > 1) return at("a second root element <" + name + ">");
    if (s[q] == '/') {
      i = q + 2;
    } else {
      open.push_back(name);
      i = q + 1;
    }
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots != 1) return "no root element";
  return "";
}

// Whether `html` names anything outside itself: an http(s) URL, a script with a source, a link
// element, an import, or a protocol-relative URL in src/href.
inline bool HasExternalReference(std::string_view html) {
  for (std::string_view bad :
       {"http://", "https://", "<script", "<link", "@import", "src=\"//", "href=\"//", "url("})
    if (html.find(bad) != std::string_view::npos) return true;
  return false;
}

}  // namespace llmq::testing
