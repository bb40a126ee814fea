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

// Every path of a command, checked together: each rule refuses with both flags named, and a
// command whose paths keep apart passes.
TEST(Files, ACommandsPathsKeepApart) {
  std::string tmpl = (fs::temp_directory_path() / "tierflow-paths-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  fs::create_directories(dir + "/disk");
  fs::create_directories(dir + "/ck");
  ASSERT_TRUE(WriteFileAtomically(dir + "/in.json", "{}").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/disk/tierflow-run.store", "x").ok());
  fs::create_symlink(dir + "/in.json", dir + "/link.json");
  using P = PathUse;
  auto check = [&](std::vector<CommandPath> paths) { return CheckCommandPaths(paths).message(); };
  const std::vector<CommandPath> run = {{"input", dir + "/in.json", P::kReads}, {"--disk", dir + "/disk", P::kWritesIn},
                                        {"--checkpoint", dir + "/ck", P::kWritesIn}};
  auto with = [&](std::vector<CommandPath> more) {
    std::vector<CommandPath> all = run;
    all.insert(all.end(), more.begin(), more.end());
    return all;
  };
  EXPECT_EQ(check(with({{"--records", dir + "/out.jsonl", P::kWrites}, {"--trace", "", P::kWrites}})), "");
  // The data loss of issue 60: the records over the run's own store file.
  EXPECT_EQ(check(with({{"--records", dir + "/disk/tierflow-run.store", P::kWrites}})),
            "--records '" + dir + "/disk/tierflow-run.store' is inside --disk '" + dir +
                "/disk', whose files this command writes: write it outside that directory");
  EXPECT_NE(check(with({{"--records", dir + "/ck/new.jsonl", P::kWrites}})).find("is inside --checkpoint"), std::string::npos);
  // The input through a link, and through `..`.
  EXPECT_EQ(check(with({{"--records", dir + "/link.json", P::kWrites}})),
            "--records '" + dir + "/link.json' is the input '" + dir + "/in.json': writing it would destroy it; choose another file");
  EXPECT_NE(check(with({{"--trace", dir + "/disk/../in.json", P::kWrites}})).find("is the input"), std::string::npos);
  EXPECT_EQ(check(with({{"--records", dir + "/o.json", P::kWrites}, {"--trace", dir + "/./o.json", P::kWrites}})),
            "--records '" + dir + "/o.json' and --trace '" + dir + "/./o.json' are one file: each output needs its own");
  EXPECT_EQ(check({{"--dir", dir + "/disk", P::kWritesIn}, {"--dir", dir + "/disk/", P::kWritesIn}}),
            "--dir '" + dir + "/disk' and --dir '" + dir + "/disk/' are one directory: each needs its own");
  EXPECT_NE(check(with({{"--save-model", dir + "/disk/model", P::kReplaces}})).find("--save-model '" + dir + "/disk/model' overlaps --disk"),
            std::string::npos);
  EXPECT_NE(check(with({{"--save-model", dir, P::kReplaces}})).find("overlaps input"), std::string::npos);
  EXPECT_EQ(check(with({{"--save-model", dir + "/model", P::kReplaces}})), "");
  // Nested directories a command writes in are allowed (a checkpoint on the disk it offloads to).
  EXPECT_EQ(check({{"--disk", dir + "/disk", P::kWritesIn}, {"--checkpoint", dir + "/disk/ck", P::kWritesIn}}), "");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tierflow
