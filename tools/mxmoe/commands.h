// The mxmoe subcommands. Each registers itself on the parent app and returns the
// function to call, after parsing, if it was chosen; that returns the exit code.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace mxmoe::cli {

using Runner = std::function<int()>;

// An integer option of at least `lo` (CLI::PositiveNumber's message quotes
// DBL_MAX as the upper bound).
inline CLI::Validator integer_at_least(long long lo) {
  return CLI::Validator(
      [lo](std::string& in) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(in, v) || v < lo)
          return "must be an integer of at least " + std::to_string(lo) + ", got " + in;
        return {};
      },
      lo == 1 ? "POSITIVE" : "INT >= " + std::to_string(lo));
}

Runner add_info(CLI::App& parent);
Runner add_run(CLI::App& parent);
Runner add_bench(CLI::App& parent);
Runner add_load(CLI::App& parent);

}  // namespace mxmoe::cli
