// Status: the result of an operation that can fail for reasons outside the program (bad files,
// bad input). Programmer errors and broken invariants abort with context instead (LLMQ_CHECK).
// [[nodiscard]]: a Status is never dropped without a word; a caller that may go on whatever
// happened says so with IgnoreError() and a comment why.
// StatusOr<T>: a T, or the Status that says why there is none (for functions with one result).
//
// This is the one error style at every boundary between units (issue 22): no exception leaves
// one. A unit may throw inside itself only where it catches, and says so at the throw ("// caught
// in <Function>"); tests/throw_test.sh holds the sources to it. Compiles as C++17 too (the CUDA
// sources include it).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

// Aborts with file:line and the failed condition: for programmer errors, never for bad input.
#define LLMQ_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "llmq: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

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

// A value, or the non-OK Status saying why there is none. Built implicitly from either, so a
// function returning StatusOr<T> may `return value;` or `return Status::NotFound(...);`. Reading
// the value of an error (value(), *, ->) is a programmer error: it aborts with the message.
template <class T>
class [[nodiscard]] StatusOr {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "StatusOr<Status>: return Status");
  template <class U>
  using EnableIfValue = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                         !std::is_same_v<std::decay_t<U>, StatusOr> &&
                                         !std::is_same_v<std::decay_t<U>, Status> &&
                                         !std::is_same_v<std::decay_t<U>, std::in_place_t>>;

 public:
  // `status` must not be OK: an OK StatusOr holds a value.
  StatusOr(Status status) : status_(std::move(status)) { LLMQ_CHECK(!status_.ok()); }
  template <class U = T, class = EnableIfValue<U>>
  StatusOr(U&& value) : value_(std::in_place, std::forward<U>(value)) {}
  template <class... Args>
  explicit StatusOr(std::in_place_t, Args&&... args)
      : value_(std::in_place, std::forward<Args>(args)...) {}

  bool ok() const { return status_.ok(); }
  // OK when there is a value.
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  T& value() & {
    Checked();
    return *value_;
  }
  const T& value() const& {
    Checked();
    return *value_;
  }
  T&& value() && {
    Checked();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Checked() const {
    if (ok()) return;
    std::fprintf(stderr, "llmq: StatusOr::value() of an error: %s\n", status_.message().c_str());
    std::abort();
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace llmq

// Propagates a non-OK Status to the caller.
#define LLMQ_RETURN_IF_ERROR(expr) \
  do {                             \
    ::llmq::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

// `lhs` = the value of `expr` (a StatusOr), or returns its Status to the caller (whose result is a
// Status or a StatusOr). `lhs` may declare: LLMQ_ASSIGN_OR_RETURN(const Plan plan, Make()); a type
// with a comma in it needs a typedef (the macro would split it).
#define LLMQ_ASSIGN_OR_RETURN(lhs, expr) \
  LLMQ_ASSIGN_OR_RETURN_IMPL_(LLMQ_STATUS_CONCAT_(_status_or_, __LINE__), lhs, expr)
#define LLMQ_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()
#define LLMQ_STATUS_CONCAT_(a, b) LLMQ_STATUS_CONCAT_INNER_(a, b)
#define LLMQ_STATUS_CONCAT_INNER_(a, b) a##b
