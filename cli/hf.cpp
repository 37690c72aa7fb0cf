// `prism hf auth login|logout|whoami`: the Hugging Face token, in the same file that
// huggingface_hub's tools read and write (HF_HOME/token).
#include "prism/io/hf.h"

#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "prism/core/error.h"

namespace prism::cli {
namespace {

// Turns terminal echo off for its lifetime, so that a typed token is not shown.
class NoEcho {
 public:
  NoEcho() {
    if (::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios quiet = saved_;
      quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
      active_ = ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
    }
  }
  ~NoEcho() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
  }
  NoEcho(const NoEcho&) = delete;
  NoEcho& operator=(const NoEcho&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

std::string read_token_from_user() {
  std::string token;
  if (::isatty(STDIN_FILENO)) {
    std::fprintf(stderr, "Hugging Face token (input hidden): ");
    std::fflush(stderr);
    NoEcho no_echo;
    std::getline(std::cin, token);
    std::fprintf(stderr, "\n");
  } else {
    std::getline(std::cin, token);
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front()))) {
    token.erase(0, 1);
  }
  if (token.empty()) fail("no token given (pipe it on stdin or type it at the prompt)");
  return token;
}

int login(bool verify) {
  auto settings = io::hf::HubSettings::from_env();
  std::string token = read_token_from_user();
  std::string who;
  if (verify) who = io::hf::whoami(settings, token);  // a wrong token is refused, not saved
  io::hf::save_token(settings, token);
  if (verify) {
    std::printf("logged in to %s as %s; token saved to %s\n", settings.endpoint.c_str(),
                who.c_str(), settings.token_path.c_str());
  } else {
    std::printf("token saved to %s (not verified)\n", settings.token_path.c_str());
  }
  return 0;
}

int logout() {
  auto settings = io::hf::HubSettings::from_env();
  if (io::hf::delete_token(settings)) {
    std::printf("removed %s\n", settings.token_path.c_str());
  } else {
    std::printf("not logged in (no token file at %s)\n", settings.token_path.c_str());
  }
  if (std::getenv("HF_TOKEN")) std::printf("note: HF_TOKEN is set and still applies\n");
  return 0;
}

int whoami() {
  auto settings = io::hf::HubSettings::from_env();
  std::printf("%s\n", io::hf::whoami(settings, io::hf::read_token(settings)).c_str());
  return 0;
}

const RegisterCommand kHf{
    "hf", "Hugging Face Hub account", [](CLI::App& app) -> Action {
      app.require_subcommand(1);
      CLI::App* auth = app.add_subcommand("auth", "Log in to the Hub, log out, show the account");
      auth->require_subcommand(1);
      auto chosen = std::make_shared<std::function<int()>>();
      auto verify = std::make_shared<bool>(true);
      CLI::App* login_cmd = auth->add_subcommand(
          "login", "Save a token (read from stdin, or typed at a prompt without echo)");
      login_cmd->add_flag("!--no-verify", *verify, "Save without asking the Hub about the token");
      login_cmd->callback([chosen, verify] { *chosen = [verify] { return login(*verify); }; });
      auth->add_subcommand("logout", "Remove the saved token")->callback([chosen] {
        *chosen = logout;
      });
      auth->add_subcommand("whoami", "Print the account of the current token")->callback([chosen] {
        *chosen = whoami;
      });
      return [chosen] { return (*chosen)(); };
    }};

}  // namespace
}  // namespace prism::cli
