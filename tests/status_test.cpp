// Status and StatusOr<T> (base/status.h): the one error style at every boundary (issue 22).
#include "base/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace llmq {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

// Halves twice through LLMQ_ASSIGN_OR_RETURN: the first error is the caller's.
StatusOr<int> Quarter(int x) {
  LLMQ_ASSIGN_OR_RETURN(const int half, Half(x));
  LLMQ_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

// The macro in a function whose result is a plain Status, assigning to an existing variable.
Status QuarterInto(int x, int* out) {
  LLMQ_ASSIGN_OR_RETURN(*out, Quarter(x));
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  const Status st = Status::NotFound("x: no such file");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_EQ(st.message(), "x: no such file");
  EXPECT_EQ(st.ToString(), "x: no such file");
}

TEST(StatusOr, HoldsAValueOrTheStatusWhyNot) {
  StatusOr<int> v = Half(8);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(v.value(), 4);
  EXPECT_EQ(*v, 4);
  *v = 5;
  EXPECT_EQ(v.value(), 5);

  const StatusOr<int> e = Half(7);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(e.status().message(), "7 is odd");
}

TEST(StatusOr, ArrowAndMoveOnlyValues) {
  StatusOr<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);
  StatusOr<const char*> c = "literal";
  EXPECT_STREQ(*c, "literal");

  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(42);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(**p, 42);
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 42);

  StatusOr<std::vector<int>> in_place(std::in_place, 3, 7);
  EXPECT_EQ(*in_place, (std::vector<int>{7, 7, 7}));
}

TEST(StatusOr, AssignOrReturnPropagatesTheFirstError) {
  StatusOr<int> q = Quarter(12);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, 3);
  EXPECT_EQ(Quarter(5).status().message(), "5 is odd");  // the first Half fails
  EXPECT_EQ(Quarter(6).status().message(), "3 is odd");  // the second one does

  int out = -1;
  ASSERT_TRUE(QuarterInto(20, &out).ok());
  EXPECT_EQ(out, 5);
  const Status st = QuarterInto(10, &out);
  EXPECT_EQ(st.message(), "5 is odd");
  EXPECT_EQ(out, 5);  // left as it was
}

TEST(StatusOrDeathTest, ReadingTheValueOfAnErrorAborts) {
  const StatusOr<int> e = Half(3);
  EXPECT_DEATH((void)e.value(), "StatusOr::value\\(\\) of an error: 3 is odd");
  EXPECT_DEATH((void)StatusOr<int>(Status::Ok()), "check failed");  // an OK Status holds no value
}

}  // namespace
}  // namespace llmq
