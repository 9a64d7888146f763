// The mxmoe subcommands. Each registers itself on the parent app and returns the
// function to call, after parsing, if it was chosen; that returns the exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace mxmoe::cli {

using Runner = std::function<int()>;

// A positive integer option (CLI::PositiveNumber's message quotes DBL_MAX as
// the upper bound).
inline CLI::Validator positive_integer() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(in, v) || v < 1) return "must be a positive integer, got " + in;
        return {};
      },
      "POSITIVE");
}

Runner add_info(CLI::App& parent);
Runner add_run(CLI::App& parent);
Runner add_bench(CLI::App& parent);

}  // namespace mxmoe::cli
