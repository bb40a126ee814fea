// Whole-file writes never leave a half-written file where a good one was, and leave no
// temporary file behind; an output that is its input is refused.
#include "tierflow/core/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tierflow {
namespace {

namespace fs = std::filesystem;

TEST(Files, WriteFileAtomicallyReplacesWholeAndKeepsTheOldOnFailure) {
  std::string tmpl = (fs::temp_directory_path() / "tierflow-files-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl, path = dir + "/out.json";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second, longer").ok());
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "second, longer");
  // A target that cannot be replaced (a directory is there): an error, and nothing else changes.
  fs::create_directory(dir + "/taken");
  fs::create_directory(dir + "/taken/inside");
  const Status st = WriteFileAtomically(dir + "/taken", "x", "schedule file");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("write schedule file '" + dir + "/taken' (rename)"), std::string::npos) << st.ToString();
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename().string().find(".tmp-") == std::string::npos ? 1 : 100;
  EXPECT_EQ(entries, 2) << "out.json and taken, no temporary file";
  EXPECT_EQ(ReadFileToString(dir + "/absent").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(RefuseOutputOverInput(path, dir + "/../" + fs::path(dir).filename().string() + "/out.json", "-o").ok());
  EXPECT_TRUE(RefuseOutputOverInput(dir + "/new.json", path, "-o").ok());
  fs::remove_all(dir);
}

// An output's directories are created; where one cannot be (a file is in the way), the error
// names that directory and the output.
TEST(Files, AnOutputCreatesItsDirectories) {
  std::string tmpl = (fs::temp_directory_path() / "tierflow-files-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(WriteFileAtomically(dir + "/a/b/c.json", "x").ok());
  EXPECT_EQ(*ReadFileToString(dir + "/a/b/c.json"), "x");
  ASSERT_TRUE(WriteFileAtomically(dir + "/plain", "file").ok());
  const Status st = WriteFileAtomically(dir + "/plain/d/e.json", "x", "schedule file");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("create the directory '" + dir + "/plain/d' of schedule file '" + dir + "/plain/d/e.json'"), std::string::npos)
      << st.ToString();
  EXPECT_TRUE(CreateParentDirectories("bare-name.json").ok()) << "no directory to create";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tierflow
