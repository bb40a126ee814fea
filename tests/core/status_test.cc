#include "tierflow/core/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace tierflow {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  TF_ASSIGN_OR_RETURN(int h, Half(x));
  TF_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, PropagatesFirstError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
  EXPECT_EQ(s.ToString(), "invalid argument: odd: 3");
}

TEST(Status, FromErrnoNamesTheOperationAndMapsTheCode) {
  Status s = FromErrno(-ENOSPC, "write 'nvme0/store.bin'");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("write 'nvme0/store.bin'"), std::string::npos);
  EXPECT_NE(s.message().find("No space left"), std::string::npos);
  EXPECT_EQ(FromErrno(EIO, "x").code(), StatusCode::kIoError);
  EXPECT_EQ(FromErrno(EROFS, "x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FromErrno(ENOENT, "x").code(), StatusCode::kNotFound);
}

TEST(Status, WithContextPrefixes) {
  EXPECT_EQ(NotFound("a").WithContext("b").message(), "b: a");
  EXPECT_TRUE(Status::Ok().WithContext("b").ok());
}

}  // namespace
}  // namespace tierflow
