// The mxmoe subcommands. Each registers itself on the parent app and returns the
// function to call, after parsing, if it was chosen; that returns the exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace mxmoe::cli {

using Runner = std::function<int()>;

Runner add_info(CLI::App& parent);
Runner add_run(CLI::App& parent);
Runner add_bench(CLI::App& parent);

}  // namespace mxmoe::cli
