// How a verb joins the `tierflow` binary: a file per verb defines a factory that adds its
// subcommand (with options bound to its own state) and returns what to run once parsed, then
// registers it with TIERFLOW_COMMAND(factory). main() parses, runs the chosen verb and turns a
// non-OK Status into one error line and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "tierflow/core/status.h"

namespace tierflow::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<Status()> run;
};

using CommandFactory = Command (*)(CLI::App& parent);

std::vector<CommandFactory>& CommandRegistry();

struct CommandRegistrar {
  explicit CommandRegistrar(CommandFactory f) { CommandRegistry().push_back(f); }
};

// (__COUNTER__, not __LINE__: the verb files are compiled a few to a unit, cli/CMakeLists.txt.)
#define TIERFLOW_COMMAND(factory) \
  static ::tierflow::cli::CommandRegistrar TF_CONCAT(tf_command_, __COUNTER__)(factory)

// Keeps option values alive for the lifetime of the program (commands bind options to them).
template <typename T>
T* Keep() {
  static std::vector<std::unique_ptr<T>> kept;
  kept.push_back(std::make_unique<T>());
  return kept.back().get();
}

}  // namespace tierflow::cli
