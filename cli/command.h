// How a verb joins the `tierflow` binary: a file per verb defines a factory that adds its
// subcommand (with options bound to its own state) and returns what to run once parsed, then
// registers it with TIERFLOW_COMMAND(factory). main() parses, runs the chosen verb and turns a
// non-OK Status into one error line and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "tierflow/core/status.h"
#include "tierflow/core/text.h"

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

// A numeric flag under core's one rule (ParseInteger, ParseReal in tierflow/core/text.h): its text
// is checked against [lo, hi] (by default what T holds) before CLI11 converts it, so that `-n 1e20`
// says "--iterations: '1e20' is above 1000000000 (an integer from 1 to 1000000000)" (run's range), NaN is
// not a number, and a 100,000-digit value is echoed as its first few dozen characters.
template <typename T>
CLI::Option* AddNumber(CLI::App* app, const std::string& name, T* value, const std::string& help,
                       T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_arithmetic_v<T>);
  CLI::Option* o = app->add_option(name, *value, help);
  const std::string flag = o->get_name();
  o->transform(CLI::Validator(
      [flag, lo, hi](std::string& text) -> std::string {
        Status bad;
        if constexpr (std::is_integral_v<T>) {
          auto v = ParseInteger(text, flag, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
          if (v.ok()) text = std::to_string(*v);
          bad = v.status();
        } else {
          auto v = ParseReal(text, flag, static_cast<double>(lo), static_cast<double>(hi));
          if (v.ok()) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.17g", *v);
            text = buf;
          }
          bad = v.status();
        }
        // CLI11 puts the flag in front of the message itself.
        return bad.ok() ? std::string() : bad.message().substr(flag.size() + 2);
      },
      "", "number"));
  return o;
}

}  // namespace tierflow::cli
