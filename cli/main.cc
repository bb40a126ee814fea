// The `tierflow` binary: a subcommand per verb, each in its own file (see command.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "command.h"

namespace tierflow::cli {
std::vector<CommandFactory>& CommandRegistry() {
  static std::vector<CommandFactory> registry;
  return registry;
}
}  // namespace tierflow::cli

namespace {

// `sweep` and `tune` fork a worker process per run, and each worker builds its scenario, schedule
// and simulation in memory new to it: faulted in 4 KiB at a time, that was about a fifth of a
// worker's CPU time, in the kernel. With glibc's malloc asked for transparent huge pages
// (the tunable glibc.malloc.hugetlb=1, read only when a process starts), a 40-run sweep of the
// quickstart spent half the system time and 0.83x the wall time (docs/sweep-format.md,
// "Parallelism and speed").
// So these verbs start themselves again with it, once; a user's own setting of it is kept (=0
// turns it off), and where the kernel has no huge pages it changes nothing.
void ReexecWithHugePageHeap(char** argv) {
  constexpr const char* kTunable = "glibc.malloc.hugetlb";
  const char* env = std::getenv("GLIBC_TUNABLES");
  if (env != nullptr && std::strstr(env, kTunable) != nullptr) return;
  const bool had = env != nullptr;
  const std::string have = had ? env : "";
  const std::string value = (have.empty() ? std::string() : have + ":") + kTunable + "=1";
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // Not started again (no /proc): run on as we are, with the environment as it was.
  if (had) {
    ::setenv("GLIBC_TUNABLES", have.c_str(), 1);
  } else {
    ::unsetenv("GLIBC_TUNABLES");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "sweep") == 0 || std::strcmp(argv[1], "tune") == 0)) ReexecWithHugePageHeap(argv);
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
