// prism: the command-line entry point. Subcommands live one per file in cli/.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/command.h"
#include "prism/core/error.h"
#include "prism/runtime/processes.h"

namespace prism::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

}  // namespace prism::cli

int main(int argc, char** argv) {
  using prism::cli::Action;
  CLI::App app{"prism: a portable inference stack", "prism"};
  app.set_version_flag("--version", std::string("prism ") + PRISM_VERSION);
  app.require_subcommand(1);

  auto& commands = prism::cli::commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, Action>> actions;
  for (auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.help);
    actions.emplace_back(sub, command.setup(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print their text; a bad option is one error line, as any other.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "prism: error: %s (--help lists the options)\n", e.what());
    return e.get_exit_code();
  }
  // In a run of several processes (prism/runtime/processes.h), a follower's errors name it.
  auto where = [] {
    prism::Processes* p = prism::Processes::running();
    return p && p->rank() != 0 ? p->name() + ": " : std::string();
  };
  int code = 1;
  try {
    for (auto& [sub, action] : actions) {
      if (sub->parsed()) code = action();
    }
  } catch (const prism::Error& e) {
    std::fprintf(stderr, "prism: error: %s%s\n", where().c_str(), e.what());
    code = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism: internal error: %s%s\n", where().c_str(), e.what());
    code = 2;
  }
  if (prism::Processes* p = prism::Processes::running()) code = p->finish(code);
  return code;
}
