// The `tierflow` binary: a subcommand per verb, each in its own file (see command.h).
#include <cstdio>
#include <string>
#include <new>
#include <exception>

#include "command.h"

namespace tierflow::cli {
std::vector<CommandFactory>& CommandRegistry() {
  static std::vector<CommandFactory> registry;
  return registry;
}
}  // namespace tierflow::cli

int main(int argc, char** argv) {
  CLI::App app{"tierflow: plan, simulate and run SSD-offloaded LLM fine-tuning schedules", "tierflow"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tierflow 0.1.0");
  std::vector<tierflow::cli::Command> commands;
  for (auto factory : tierflow::cli::CommandRegistry()) commands.push_back(factory(app));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A usage error (an unknown flag, a missing argument, a value of the wrong type): one line in
    // the form of every other error, naming the verb, exit status 2 as for any invalid argument.
    std::string verb;
    for (CLI::App* sub = &app;;) {
      CLI::App* next = nullptr;
      for (CLI::App* s : sub->get_subcommands()) {
        if (s->parsed()) next = s;
      }
      if (next == nullptr) break;
      verb += " " + next->get_name();
      sub = next;
    }
    std::fprintf(stderr, "tierflow%s: error: usage: %s (tierflow%s --help)\n", verb.c_str(), e.what(), verb.c_str());
    return 2;
  }
  for (auto& c : commands) {
    if (c.app->parsed()) {
      tierflow::Status s;
      // Every input is checked at the door; an exception reaching here is a bug, reported as one
      // line instead of an abort.
      try {
        s = c.run();
      } catch (const std::bad_alloc&) {
        s = tierflow::ResourceExhausted("out of memory (an input asks for more than this machine holds; please report the command)");
      } catch (const std::exception& e) {
        s = tierflow::Internal(std::string("unexpected ") + e.what() + " (a bug: please report the command)");
      }
      if (!s.ok()) {
        // Each message echoes a few dozen characters of a value (core/text.h Quoted); a path or a
        // list may still be long, and an error is one line a terminal shows whole.
        std::string line = s.ToString();
        constexpr size_t kMost = 3000;
        if (line.size() > kMost) line = line.substr(0, kMost) + "... (" + std::to_string(line.size()) + " characters in all)";
        std::fprintf(stderr, "tierflow %s: error: %s\n", c.app->get_name().c_str(), line.c_str());
        return s.code() == tierflow::StatusCode::kInvalidArgument ? 2 : 1;
      }
      return 0;
    }
  }
  return 0;
}
