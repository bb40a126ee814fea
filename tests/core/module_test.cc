// OpenModuleEntry (core/module.h): a missing module is Unavailable with the loader's reason and
// what it is for; a module without the entry is Internal; either answer is given once and kept.
#include <gtest/gtest.h>

#include "tierflow/core/module.h"

namespace tierflow {
namespace {

TEST(Module, AMissingModuleIsUnavailableSayingWhatNeedsIt) {
  auto entry = OpenModuleEntry("libtierflow_no_such_module.so", "entry", "the test needs a module it never built");
  ASSERT_FALSE(entry.ok());
  EXPECT_EQ(entry.status().code(), StatusCode::kUnavailable);
  const std::string& m = entry.status().message();
  EXPECT_NE(m.find("module libtierflow_no_such_module.so could not be loaded"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot open shared object file"), std::string::npos) << m;  // the loader's reason
  EXPECT_NE(m.find("the test needs a module it never built"), std::string::npos) << m;
}

TEST(Module, AnEntryIsFoundAndAMissingOneIsInternal) {
  // The C library's maths, a module as good as any: cos is there, our entry is not.
  auto cos_entry = OpenModuleEntry("libm.so.6", "cos", "maths");
  ASSERT_TRUE(cos_entry.ok()) << cos_entry.status().ToString();
  EXPECT_EQ(reinterpret_cast<double (*)(double)>(*cos_entry)(0.0), 1.0);
  auto missing = OpenModuleEntry("libm.so.6", "tierflow_no_such_entry", "maths");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInternal);
  EXPECT_NE(missing.status().message().find("has no tierflow_no_such_entry"), std::string::npos);
}

TEST(Module, TheFirstAnswerIsKept) {
  auto first = OpenModuleEntry("libm.so.6", "sin", "maths");
  auto second = OpenModuleEntry("libm.so.6", "sin", "another reason");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(*first, *second);
}

}  // namespace
}  // namespace tierflow
