// The `prism` command's subcommands. Each lives in its own file under cli/ and registers
// itself with a static RegisterCommand:
//
//   const RegisterCommand kTokenize{"tokenize", "Print the token ids of a text",
//                                   [](CLI::App& app) -> Action {
//     auto opts = std::make_shared<Options>();
//     app.add_option("--tokenizer", opts->tokenizer)->required();
//     return [opts] { return run(*opts); };
//   }};
//
// main() parses the command line, runs the chosen action, and turns a prism::Error into one
// line on stderr and exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace prism::cli {

using Action = std::function<int()>;
// Adds the subcommand's options to `app` and returns what to run when it is chosen.
using Setup = std::function<Action(CLI::App& app)>;

struct Command {
  std::string name;
  std::string help;
  Setup setup;
};

std::vector<Command>& commands();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string help, Setup setup) {
    commands().push_back({std::move(name), std::move(help), std::move(setup)});
  }
};

}  // namespace prism::cli
