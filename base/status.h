// Status: the result of an operation that can fail for reasons outside the program (bad files,
// bad input). Programmer errors and broken invariants abort with context instead (LLMQ_CHECK).
// [[nodiscard]]: a Status is never dropped without a word; a caller that may go on whatever
// happened says so with IgnoreError() and a comment why.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace llmq {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk,
    kInvalidArgument,
    kNotFound,
    kCorruption,
    kIoError,
    kUnsupported,
    kInternal
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(Code::kInvalidArgument, std::move(m));
  }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status Corruption(std::string m) { return Status(Code::kCorruption, std::move(m)); }
  static Status IoError(std::string m) { return Status(Code::kIoError, std::move(m)); }
  static Status Unsupported(std::string m) { return Status(Code::kUnsupported, std::move(m)); }
  // A failure of the machinery (device, allocation) rather than of the input.
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "OK" : message_; }
  // Drops this Status on purpose (best effort: the caller goes on either way).
  void IgnoreError() const {}

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace llmq

// Propagates a non-OK Status to the caller.
#define LLMQ_RETURN_IF_ERROR(expr) \
  do {                             \
    ::llmq::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

// Aborts with file:line and the failed condition: for programmer errors, never for bad input.
#define LLMQ_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "llmq: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)
