// mxmoe: command-line front end (info, run, bench, load).
#include <cstdio>
#include <exception>
#include <map>
#include <new>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mxmoe: Mixture-of-Experts layers with MXFP4 expert weights (GPT-OSS)"};
  app.require_subcommand(1);
  std::map<std::string, mxmoe::cli::Runner> runners{
      {"info", mxmoe::cli::add_info(app)},
      {"run", mxmoe::cli::add_run(app)},
      {"bench", mxmoe::cli::add_bench(app)},
      {"load", mxmoe::cli::add_load(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a bad command line, like every other error, exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) return runners.at(sub->get_name())();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mxmoe: out of host memory (the request is too large)\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxmoe: %s\n", e.what());
    return 2;
  }
  return 2;
}
