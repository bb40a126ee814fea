// Whole-file reads and writes for every file the tool reads or writes as a whole (schedules,
// trace records, sweep tables, profiles): leveldb's ReadFileToString and WriteFileAtomically.
// A write never leaves a half-written file where a good one was: the text goes to a temporary
// name beside the target, is flushed to the disk, and is renamed over the target only when
// complete (an error or a crash leaves the old file, and the temporary one is removed).
//
// Thread safety: free functions; two writers of one path at once each leave a whole file, the
// later rename winning.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow {

// NotFound when `path` does not exist; the errno's status otherwise, naming `what` and the path.
StatusOr<std::string> ReadFileToString(const std::string& path, std::string_view what = "file");

// Creates the directories `path` is in, as `mkdir -p` does (an output's parent: `plan -o
// out/x.json` in a fresh checkout); the errno's status naming the directory and `what` otherwise.
Status CreateParentDirectories(const std::string& path, std::string_view what = "file");

// Writes `contents` to `path` through TemporaryPath(path), fsync, rename and fsync of the
// directory; the directories it is in are created first.
Status WriteFileAtomically(const std::string& path, std::string_view contents, std::string_view what = "file");

// For a file written as a stream (trace records): write it at TemporaryPath(path), then
// ReplaceWith(tmp, path) syncs it, renames it over `path` and syncs the directory; on any error
// the temporary file is removed and `path` is left as it was.
std::string TemporaryPath(const std::string& path);
Status ReplaceWith(const std::string& tmp, const std::string& path, std::string_view what = "file");

// fsync of the directory `dir` itself: the renames and new entries in it made durable.
Status SyncDirectory(const std::string& dir);

// What a command does with a path it names, for CheckCommandPaths.
enum class PathUse {
  kReads,     // an input (a file, or a directory read from)
  kWrites,    // an output file, written whole or as a stream, in place of what was there
  kWritesIn,  // a directory whose files the command writes: a --disk, a --checkpoint, probe's -o
  kReplaces,  // a directory the command replaces as a whole: --save-model
};

struct CommandPath {
  std::string flag;  // "-o", "--records", "--disk", "input"
  std::string path;  // as given (empty: not given, skipped)
  PathUse use = PathUse::kReads;
};

// Every path one command names, checked together before anything is written (after following
// links and `..`): an output file is none of the inputs, no other output and not inside a
// directory the command writes in (a run whose --records was its own store file in its --disk
// overwrote the training state with trace records); two directories it writes in are not one
// (each has its own lock, store and files); a directory it writes in is not an existing file; a
// directory it replaces neither holds nor lies in another of its paths. InvalidArgument naming
// the flags, the paths and the rule.
Status CheckCommandPaths(const std::vector<CommandPath>& paths);

}  // namespace tierflow
