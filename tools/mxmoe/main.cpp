// mxmoe: command-line front end (info, run, bench).
#include <cstdio>
#include <exception>
#include <map>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mxmoe: Mixture-of-Experts layers with MXFP4 expert weights (GPT-OSS)"};
  app.require_subcommand(1);
  std::map<std::string, mxmoe::cli::Runner> runners{
      {"info", mxmoe::cli::add_info(app)},
      {"run", mxmoe::cli::add_run(app)},
      {"bench", mxmoe::cli::add_bench(app)},
  };
  CLI11_PARSE(app, argc, argv);
  try {
    for (CLI::App* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxmoe: %s\n", e.what());
    return 1;
  }
  return 1;
}
