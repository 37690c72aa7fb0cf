// `prism version`: the same as `prism --version`, for scripts that prefer a subcommand.
#include <cstdio>

#include "cli/command.h"

namespace {

const prism::cli::RegisterCommand kVersion{"version", "Print the version",
                                           [](CLI::App&) -> prism::cli::Action {
                                             return [] {
                                               std::printf("prism %s\n", PRISM_VERSION);
                                               return 0;
                                             };
                                           }};

}  // namespace
