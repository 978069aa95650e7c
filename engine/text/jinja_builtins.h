// The filters, tests and methods of values the interpreter supports (jinja2's and Python's, as
// transformers' sandbox exposes them). Their errors are bare messages: the evaluator adds the
// template and line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/text/jinja_value.h"

namespace llmq::jinja {

// Evaluated arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

bool IsFilter(std::string_view name);
bool IsTest(std::string_view name);
bool IsMethod(std::string_view name);  // a method of str, dict or list (x.name(...))

Status ApplyFilter(const std::string& name, const Value& in, const Args& args, Value* out);
Status ApplyTest(const std::string& name, const Value& in, const Args& args, bool* out);
Status CallMethod(const Value& obj, const std::string& name, const Args& args, Value* out);

// x[key] for a dict, list or string (negative indices count from the end); undefined when
// absent, as jinja2's getitem gives. An error for an undefined `x`.
Status GetItem(const Value& x, const Value& key, Value* out);
// x[start:stop:step] for a list or string (undefined bounds: Python's defaults).
Status Slice(const Value& x, const Value& start, const Value& stop, const Value& step, Value* out);
// Whether `needle` is in `hay` (substring, list item, dict key).
Status Contains(const Value& hay, const Value& needle, bool* out);
// The items a for loop visits: a list's, a dict's keys, a string's characters.
Status Iterate(const Value& v, std::vector<Value>* out);

}  // namespace llmq::jinja
