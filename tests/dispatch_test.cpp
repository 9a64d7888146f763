// The backend choice over every (device SM, compiled archs, override), errors
// included, against a table written out by hand.
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mxmoe/dispatch.h"
#include "support/test_support.h"

namespace mxmoe {

void PrintTo(const LeftOutBackend& l, std::ostream* os) { *os << backend_name(l.kind) << " (" << l.reason << ")"; }

namespace {

const std::vector<std::vector<std::string>> kArchSets = {
    {}, {"80"}, {"90a"}, {"80", "90a"}, {"80", "90a", "100a", "120a"}};
const std::vector<std::optional<int>> kSms = {std::nullopt, 70, 75, 80, 86, 89, 90,
                                              100, 103, 110, 120, 121};

// Expected auto pick per SM with bf16 activations (the default), one column
// per kArchSets entry: sm90 on SM90 with 90a code; sm100/sm120 consume MXFP8
// only, so elsewhere the pick is portable where compiled code runs on the
// device ('a' code only on its own SM), else cpu (the CPU kernels).
const std::map<int, std::string> kAutoTable = {
    {0, "cpu cpu cpu cpu cpu"},  // no GPU
    {70, "cpu cpu cpu cpu cpu"},
    {75, "cpu cpu cpu cpu cpu"},
    {80, "cpu portable cpu portable portable"},
    {86, "cpu portable cpu portable portable"},
    {89, "cpu portable cpu portable portable"},
    {90, "cpu cpu sm90 sm90 sm90"},
    {100, "cpu cpu cpu cpu portable"},
    {103, "cpu cpu cpu cpu cpu"},  // 100a code does not run on SM103
    {110, "cpu cpu cpu cpu cpu"},
    {120, "cpu cpu cpu cpu portable"},
    {121, "cpu cpu cpu cpu cpu"},  // 120a code does not run on SM121
};

std::string expected_auto(const std::optional<int>& sm, size_t arch_set) {
  std::istringstream row(kAutoTable.at(sm.value_or(0)));
  std::string name;
  for (size_t i = 0; i <= arch_set; ++i) row >> name;
  return name;
}

bool has_90a(const std::vector<std::string>& archs) {
  for (const auto& a : archs)
    if (a == "90a") return true;
  return false;
}

DispatchInput input(const std::optional<int>& sm, const std::vector<std::string>& archs,
                    const std::string& override_name) {
  DispatchInput in;
  in.device_sm = sm;
  in.device_name = sm ? "Test GPU" : "";
  in.no_device_reason = sm ? "" : "no CUDA device visible";
  in.compiled_archs = archs;
  in.shape = kGptOss20b;
  in.override_name = override_name;
  in.override_source = "--backend";
  return in;
}

TEST(Dispatch, EveryCombinationIsCompleteAndMatchesTheTable) {
  std::vector<std::string> overrides = {"auto", ""};
  for (BackendKind k : kAllBackends) overrides.push_back(backend_name(k));
  overrides.push_back("sm91");
  int checked = 0;
  for (const auto& sm : kSms)
    for (size_t ai = 0; ai < kArchSets.size(); ++ai)
      for (const std::string& ov : overrides) {
        SCOPED_TRACE(::testing::Message() << "SM " << sm.value_or(0) << " archs #" << ai << " override '" << ov << "'");
        const std::string want = expected_auto(sm, ai);
        DispatchResult r;
        const Status st = choose_backend(input(sm, kArchSets[ai], ov), &r);
        ++checked;
        if (ov == "sm91") {
          EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
          EXPECT_NE(st.message().find("sm91"), std::string::npos) << st.message();
          EXPECT_NE(st.message().find("auto, cpu, reference, portable, sm90, sm100, sm120"), std::string::npos)
              << st.message();
          continue;
        }
        if (ov == "auto" || ov.empty()) {
          ASSERT_TRUE(st.ok()) << st.message();
          EXPECT_EQ(backend_name(r.backend), want);
        } else if (ov == "cpu" || ov == "reference" || ov == want ||
                   ((ov == "sm90" || ov == "portable") && sm == 90 && has_90a(kArchSets[ai]))) {
          ASSERT_TRUE(st.ok()) << st.message();
          EXPECT_EQ(backend_name(r.backend), ov);
          EXPECT_NE(r.reason.find("requested by --backend"), std::string::npos) << r.reason;
        } else {
          // Forcing what cannot run is an error that names the backend, never a pick.
          EXPECT_EQ(st.code(), StatusCode::kUnsupported) << "picked " << backend_name(r.backend);
          EXPECT_EQ(st.message().rfind(ov, 0), 0u) << st.message();
          EXPECT_NE(st.message().find("requested by --backend"), std::string::npos) << st.message();
          continue;
        }
        EXPECT_EQ(r.reason.rfind(std::string(backend_name(r.backend)) + ": ", 0), 0u) << r.reason;
        // The pick is available by the same rules the table shows.
        EXPECT_TRUE(backend_available(r.backend, input(sm, kArchSets[ai], "auto"), nullptr));
      }
  EXPECT_EQ(checked, int(kSms.size() * kArchSets.size() * overrides.size()));
}

TEST(Dispatch, CodeForOtherArchsDoesNotChangeADevicesPick) {
  // Engines shipped bugs where adding one arch altered another's default.
  for (const auto& sm : kSms) {
    if (!sm) continue;
    for (const auto& archs : kArchSets) {
      std::vector<std::string> relevant;
      for (const auto& a : archs)
        if (arch_code_runs_on(a, *sm)) relevant.push_back(a);
      DispatchResult all, only;
      ASSERT_TRUE(choose_backend(input(sm, archs, "auto"), &all).ok());
      ASSERT_TRUE(choose_backend(input(sm, relevant, "auto"), &only).ok());
      EXPECT_EQ(all.backend, only.backend) << "SM" << *sm;
    }
  }
}

TEST(Dispatch, ReasonsAndErrorsReadAsSpecified) {
  DispatchResult r;
  ASSERT_TRUE(choose_backend(input(90, {"80", "90a"}, "auto"), &r).ok());
  EXPECT_EQ(r.reason, "sm90: sm90 runs on SM90 (code for 90a is compiled in)");
  ASSERT_TRUE(choose_backend(input(90, {"80"}, "auto"), &r).ok());
  EXPECT_EQ(r.reason,
            "cpu: sm90 has no code that runs on SM90: this binary carries code for 80; portable has no code that "
            "runs on SM90: this binary carries code for 80; the CPU kernels run on this CPU");
  ASSERT_TRUE(choose_backend(input(90, {"80", "90a"}, "sm90"), &r).ok());
  EXPECT_EQ(r.reason, "sm90: requested by --backend; sm90 runs on SM90 (code for 90a is compiled in)");
  // Plain 90 code has no wgmma.
  Status st = choose_backend(input(90, {"80", "90"}, "sm90"), &r);
  EXPECT_EQ(st.message(), "sm90 has no code that runs on SM90: this binary carries code for 80, 90 "
                          "(requested by --backend)");

  DispatchInput a100 = input(80, {"80", "90a"}, "sm90");
  a100.device_name = "NVIDIA A100";
  st = choose_backend(a100, &r);
  EXPECT_EQ(st.message(), "sm90 needs an SM90 GPU; device 0 is SM80 (NVIDIA A100) (requested by --backend)");

  st = choose_backend(input(90, {"80"}, "portable"), &r);
  EXPECT_EQ(st.message(), "portable has no code that runs on SM90: this binary carries code for 80 "
                          "(requested by --backend)");

  ASSERT_TRUE(choose_backend(input(std::nullopt, {}, "auto"), &r).ok());
  EXPECT_EQ(r.reason, "cpu: portable needs a GPU; no CUDA device visible; the CPU kernels run on this CPU");
  ASSERT_TRUE(choose_backend(input(std::nullopt, {}, "reference"), &r).ok());
  EXPECT_EQ(r.reason, "reference: requested by --backend; the fp64 reference runs anywhere, on either activation "
                      "format");

  ASSERT_TRUE(choose_backend(input(75, {"80"}, "auto"), &r).ok());
  EXPECT_NE(r.reason.find("portable needs an SM80+ GPU; device 0 is SM75"), std::string::npos) << r.reason;

  DispatchInput bad = input(90, {"90a"}, "auto");
  bad.shape.hidden = 2890;
  EXPECT_EQ(choose_backend(bad, &r).code(), StatusCode::kInvalidArgument);
}

TEST(Dispatch, AutoPicksSm90OnSm90AndPortableWhenForced) {
  EXPECT_TRUE(backend_built(BackendKind::kSm90, input(90, {"90a"}, "auto")));
  std::string why;
  EXPECT_TRUE(backend_available(BackendKind::kSm90, input(90, {"90a"}, "auto"), &why)) << why;
  DispatchResult r;
  ASSERT_TRUE(choose_backend(input(90, {"90a"}, "auto"), &r).ok());
  EXPECT_EQ(r.backend, BackendKind::kSm90);
  ASSERT_TRUE(choose_backend(input(90, {"90a"}, "portable"), &r).ok());
  EXPECT_EQ(r.backend, BackendKind::kPortable);
}

// MXFP8 activations on SM90: no GPU backend there consumes them, nor do the
// CPU kernels, so auto passes over each with the reason and lands on the
// reference; a forced one is refused.
TEST(Dispatch, Mxfp8ActivationsSkipTheBf16Backends) {
  DispatchInput in = input(90, {"80", "90a"}, "auto");
  in.activations = ActivationFormat::kMxfp8;
  DispatchResult r;
  ASSERT_TRUE(choose_backend(in, &r).ok());
  EXPECT_EQ(r.backend, BackendKind::kReference);
  EXPECT_NE(r.reason.find("sm90 consumes bf16 activations, not mxfp8"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("portable consumes bf16 activations, not mxfp8"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("cpu consumes bf16 activations, not mxfp8 (the reference computes them)"), std::string::npos)
      << r.reason;
  in.override_name = "sm90";
  const Status st = choose_backend(in, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("sm90 consumes bf16 activations, not mxfp8"), std::string::npos) << st.message();
  std::string why;
  EXPECT_FALSE(backend_available(BackendKind::kPortable, in, &why));
  EXPECT_FALSE(backend_available(BackendKind::kCpu, in, &why));
  EXPECT_TRUE(backend_available(BackendKind::kReference, in, &why));
  EXPECT_EQ(check_activation_format(BackendKind::kPortable, ActivationFormat::kMxfp8).code(), StatusCode::kUnsupported);
  EXPECT_EQ(check_activation_format(BackendKind::kCpu, ActivationFormat::kMxfp8).code(), StatusCode::kUnsupported);
  EXPECT_TRUE(check_activation_format(BackendKind::kReference, ActivationFormat::kMxfp8).ok());
  EXPECT_EQ(parse_activation_format("mxfp8"), ActivationFormat::kMxfp8);
  EXPECT_EQ(parse_activation_format("fp8"), std::nullopt);
}

// MXFP8 activations on Blackwell: sm100 / sm120 where their code is in the
// binary; with bf16 they pass, saying how to get them; a build without
// CUTLASS left them out and says so; 100a code does not serve SM103.
TEST(Dispatch, BlackwellBackendsTakeMxfp8Activations) {
  const std::vector<std::string> all = {"80", "90a", "100a", "120a"};
  for (const auto& [sm, kind] : {std::pair{100, BackendKind::kSm100}, std::pair{120, BackendKind::kSm120}}) {
    SCOPED_TRACE(sm);
    DispatchInput in = input(sm, all, "auto");
    DispatchResult r;
    ASSERT_TRUE(choose_backend(in, &r).ok());
    EXPECT_EQ(r.backend, BackendKind::kPortable);
    EXPECT_NE(r.reason.find(std::string(backend_name(kind)) +
                            " consumes mxfp8 activations, not bf16 (ask for mxfp8 activations)"),
              std::string::npos)
        << r.reason;
    in.activations = ActivationFormat::kMxfp8;
    ASSERT_TRUE(choose_backend(in, &r).ok());
    EXPECT_EQ(r.backend, kind) << r.reason;
    EXPECT_NE(r.reason.find("code for " + std::to_string(sm) + "a is compiled in"), std::string::npos) << r.reason;
    in.left_out = {{kind, "built without CUTLASS"}};
    ASSERT_TRUE(choose_backend(in, &r).ok());
    EXPECT_EQ(r.backend, BackendKind::kReference);  // portable and cpu take bf16 only
    EXPECT_NE(r.reason.find(std::string(backend_name(kind)) + " is left out of this build (built without CUTLASS)"),
              std::string::npos)
        << r.reason;
  }
  DispatchInput in = input(103, all, "sm100");
  in.activations = ActivationFormat::kMxfp8;
  DispatchResult r;
  const Status st = choose_backend(in, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("sm100 has no code that runs on SM103"), std::string::npos) << st.message();
  EXPECT_TRUE(check_activation_format(BackendKind::kSm100, ActivationFormat::kMxfp8).ok());
  EXPECT_EQ(check_activation_format(BackendKind::kSm120, ActivationFormat::kBf16).code(), StatusCode::kUnsupported);
}

// Why a build leaves a backend out, for each way of configuring it.
TEST(Dispatch, LeftOutBackendsSayWhy) {
  const std::vector<std::string> all = {"80", "90a", "100a", "120a"};
  using K = BackendKind;
  using L = std::vector<LeftOutBackend>;
  EXPECT_EQ(backends_left_out({.nvcc = true, .cuda = true, .cutlass = true, .archs = all}), L{});
  EXPECT_EQ(backends_left_out({.nvcc = true, .cuda = true, .cutlass = true, .archs = {"80-real", "90a-real", "100a",
                                                                                       "120a-real"}}),
            L{});
  EXPECT_EQ(backends_left_out({.nvcc = true, .cuda = true, .cutlass = false, .archs = all}),
            (L{{K::kSm100, "built without CUTLASS"}, {K::kSm120, "built without CUTLASS"}}));
  EXPECT_EQ(backends_left_out({.nvcc = true, .cuda = true, .cutlass = true, .archs = {"80", "100a"}}),
            (L{{K::kSm90, "sm_90a not among the compiled targets"},
               {K::kSm120, "sm_120a not among the compiled targets"}}));
  // Plain 90 / 120 code has no wgmma, no block-scaled MMA.
  EXPECT_EQ(backends_left_out({.nvcc = true, .cuda = true, .cutlass = false, .archs = {"90", "120"}}),
            (L{{K::kSm90, "sm_90a not among the compiled targets"},
               {K::kSm100, "built without CUTLASS and sm_100a not among the compiled targets"},
               {K::kSm120, "built without CUTLASS and sm_120a not among the compiled targets"}}));
  for (bool cutlass : {false, true}) {
    EXPECT_EQ(backends_left_out({.nvcc = false, .cuda = false, .cutlass = cutlass, .archs = {}}),
              (L{{K::kPortable, "built without nvcc"}, {K::kSm90, "built without nvcc"},
                 {K::kSm100, "built without nvcc"}, {K::kSm120, "built without nvcc"}}));
    EXPECT_EQ(backends_left_out({.nvcc = true, .cuda = false, .cutlass = cutlass, .archs = {}}),
              (L{{K::kPortable, "built with MXMOE_CUDA=OFF"}, {K::kSm90, "built with MXMOE_CUDA=OFF"},
                 {K::kSm100, "built with MXMOE_CUDA=OFF"}, {K::kSm120, "built with MXMOE_CUDA=OFF"}}));
  }
}

// This binary's left-out list against what CMake compiled into it (the
// MXMOE_WITH_* definitions come with the objects), and backend_info with it.
TEST(Dispatch, ThisBuildLeavesOutExactlyWhatItDidNotCompile) {
  const std::map<BackendKind, bool> compiled = {
      {BackendKind::kCpu, true},
      {BackendKind::kReference, true},
#ifdef MXMOE_WITH_CUDA
      {BackendKind::kPortable, true},
#else
      {BackendKind::kPortable, false},
#endif
#ifdef MXMOE_WITH_SM90
      {BackendKind::kSm90, true},
#else
      {BackendKind::kSm90, false},
#endif
#if defined(MXMOE_WITH_SM100) && defined(MXMOE_WITH_BLOCKSCALED)
      {BackendKind::kSm100, true},
#else
      {BackendKind::kSm100, false},
#endif
#if defined(MXMOE_WITH_SM120) && defined(MXMOE_WITH_BLOCKSCALED)
      {BackendKind::kSm120, true},
#else
      {BackendKind::kSm120, false},
#endif
  };
  const std::vector<LeftOutBackend> out = compiled_backends_left_out();
  const DispatchInput here = dispatch_input_for_this_process("auto", kGptOss20b);
  EXPECT_EQ(here.left_out, out);
  for (BackendKind k : kAllBackends) {
    SCOPED_TRACE(backend_name(k));
    std::string why;
    EXPECT_EQ(backend_built(k, here, &why), compiled.at(k)) << why;
    EXPECT_EQ(backend_info(k).built, compiled.at(k));
    EXPECT_EQ(backend_info(k).why_not_built, why);
    EXPECT_EQ(why.empty(), compiled.at(k)) << why;
  }
}

// A left-out backend is never picked, shows "no" and why in the table, and
// forcing it is an error that says why.
TEST(Dispatch, LeftOutBackendsAreNeverPicked) {
  const std::vector<LeftOutBackend> no_cutlass =
      backends_left_out({.nvcc = true, .cuda = true, .cutlass = false, .archs = {"80", "90a", "100a", "120a"}});
  ASSERT_EQ(no_cutlass.size(), 2u);
  for (const auto& sm : kSms)
    for (const auto& archs : kArchSets)
      for (ActivationFormat act : {ActivationFormat::kBf16, ActivationFormat::kMxfp8}) {
        SCOPED_TRACE(::testing::Message() << "SM " << sm.value_or(0) << " archs " << archs.size() << " "
                                          << activation_format_name(act));
        DispatchInput in = input(sm, archs, "auto");
        in.activations = act;
        in.left_out = no_cutlass;
        DispatchResult r;
        ASSERT_TRUE(choose_backend(in, &r).ok());
        EXPECT_NE(r.backend, BackendKind::kSm100);
        EXPECT_NE(r.backend, BackendKind::kSm120);
        for (BackendKind k : {BackendKind::kSm100, BackendKind::kSm120}) {
          in.override_name = backend_name(k);
          const Status st = choose_backend(in, &r);
          EXPECT_EQ(st.code(), StatusCode::kUnsupported);
          EXPECT_EQ(st.message(), std::string(backend_name(k)) +
                                      " is left out of this build (built without CUTLASS) (requested by --backend)");
        }
      }
  DispatchInput in = input(120, {"80", "90a", "100a", "120a"}, "auto");
  in.activations = ActivationFormat::kMxfp8;
  in.left_out = no_cutlass;
  const std::string table = describe_backends(in);
  for (const char* name : {"sm100", "sm120"}) {
    const size_t row = table.find(std::string("\n") + name + " ");
    ASSERT_NE(row, std::string::npos) << table;
    const std::string line = table.substr(row + 1, table.find('\n', row + 1) - row - 1);
    EXPECT_EQ(line.substr(10, 7), "no     ") << line;
    EXPECT_NE(line.find(std::string(name) + " is left out of this build (built without CUTLASS)"), std::string::npos)
        << line;
  }
  EXPECT_NE(table.find("\nportable  yes "), std::string::npos) << table;
  EXPECT_NE(table.find("pick: reference"), std::string::npos) << table;  // cpu and portable take bf16 only
}

TEST(Dispatch, ArchCodeCompatibility) {
  EXPECT_TRUE(arch_code_runs_on("80", 80));
  EXPECT_TRUE(arch_code_runs_on("80", 86));
  EXPECT_TRUE(arch_code_runs_on("80", 89));
  EXPECT_FALSE(arch_code_runs_on("80", 90));  // SASS is not forward compatible across majors
  EXPECT_FALSE(arch_code_runs_on("80", 75));
  EXPECT_FALSE(arch_code_runs_on("86", 80));
  EXPECT_TRUE(arch_code_runs_on("80-real", 86));
  EXPECT_FALSE(arch_code_runs_on("80-virtual", 80));
  EXPECT_TRUE(arch_code_runs_on("90a", 90));
  EXPECT_FALSE(arch_code_runs_on("90a", 100));
  EXPECT_TRUE(arch_code_runs_on("90", 90));
  EXPECT_FALSE(arch_code_runs_on("100a", 103));
  EXPECT_TRUE(arch_code_runs_on("100f", 103));
  EXPECT_TRUE(arch_code_runs_on("120f", 121));
  EXPECT_FALSE(arch_code_runs_on("120a", 121));
  EXPECT_FALSE(arch_code_runs_on("sm_90", 90));
  EXPECT_FALSE(arch_code_runs_on("", 90));
  // Plain "90" code carries no wgmma: portable may use it, sm90 may not.
  std::string why;
  EXPECT_TRUE(backend_available(BackendKind::kPortable, input(90, {"90"}, "auto"), &why)) << why;
  EXPECT_TRUE(backend_available(BackendKind::kPortable, input(86, {"80-real"}, "auto"), &why)) << why;
}

TEST(Dispatch, ThisProcessTakesTheCallerBeforeTheEnvironment) {
  DispatchResult r;
  {
    testing::ScopedEnv env("MXMOE_BACKEND", "cpu");
    ASSERT_TRUE(choose_backend_for_this_process("auto", kGptOss20b, &r).ok());
    EXPECT_EQ(r.backend, BackendKind::kCpu);
    EXPECT_NE(r.reason.find("MXMOE_BACKEND"), std::string::npos) << r.reason;
  }
  {
    testing::ScopedEnv env("MXMOE_BACKEND", "bogus");
    const Status st = choose_backend_for_this_process("", kGptOss20b, &r);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("MXMOE_BACKEND"), std::string::npos) << st.message();
    ASSERT_TRUE(choose_backend_for_this_process("cpu", kGptOss20b, &r).ok());
    EXPECT_EQ(r.backend, BackendKind::kCpu);
    EXPECT_NE(r.reason.find("--backend / API"), std::string::npos) << r.reason;
  }
  {
    testing::ScopedEnv env("MXMOE_BACKEND", nullptr);
    EXPECT_EQ(dispatch_input_for_this_process("auto", kGptOss20b).override_name, "auto");
    EXPECT_EQ(choose_backend_for_this_process("nope", kGptOss20b, &r).code(), StatusCode::kInvalidArgument);
  }
}

// The cpu backend's kernel path is part of its reason; where MXMOE_CPU_ISA
// names a path this CPU lacks (or none), cpu cannot run, auto says why and
// takes the reference, and forcing cpu is refused with the same words.
TEST(Dispatch, CpuKernelsAreNamedAndABadPathPassesToTheReference) {
  DispatchInput in = input(std::nullopt, {}, "auto");
  in.cpu_kernels = "avx2 kernels (forced by MXMOE_CPU_ISA)";
  DispatchResult r;
  ASSERT_TRUE(choose_backend(in, &r).ok());
  EXPECT_EQ(r.reason, "cpu: portable needs a GPU; no CUDA device visible; the CPU kernels run on this CPU: avx2 "
                      "kernels (forced by MXMOE_CPU_ISA)");
  in.cpu_kernels = "MXMOE_CPU_ISA=avx1024 names no cpu kernel path (amx, avx512_vnni, avx512, avx2, scalar)";
  in.cpu_kernels_ok = false;
  ASSERT_TRUE(choose_backend(in, &r).ok());
  EXPECT_EQ(r.backend, BackendKind::kReference);
  EXPECT_NE(r.reason.find("cpu: MXMOE_CPU_ISA=avx1024 names no cpu kernel path"), std::string::npos) << r.reason;
  in.override_name = "cpu";
  const Status st = choose_backend(in, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("MXMOE_CPU_ISA=avx1024"), std::string::npos) << st.message();
}

TEST(Dispatch, InfoTablesNameEveryBackendAndThePick) {
  const std::string t = describe_backends(input(90, {"80", "90a"}, "auto"));
  for (BackendKind k : kAllBackends) EXPECT_NE(t.find(std::string("\n") + backend_name(k) + " "), std::string::npos) << t;
  EXPECT_NE(t.find("pick: sm90 (sm90: sm90 runs on SM90"), std::string::npos) << t;
  EXPECT_NE(t.find("\nsm90      yes"), std::string::npos) << t;
  const std::string forced = describe_backends(input(80, {"80"}, "sm120"));
  EXPECT_NE(forced.find("pick: none: sm120 needs an SM120 or SM121 GPU"), std::string::npos) << forced;
  EXPECT_NE(forced.find("have not yet\nrun on Blackwell hardware"), std::string::npos) << forced;

  const std::string p = describe_preparation(kGptOss20b);
  EXPECT_NE(p.find("2944"), std::string::npos) << p;  // sm100 pads 2880 to 2944
  EXPECT_NE(p.find("[up; gate]"), std::string::npos) << p;
  for (BackendKind k : kAllBackends) EXPECT_NE(p.find(std::string("\n") + backend_name(k) + " "), std::string::npos) << p;
  EXPECT_NE(describe_preparation({1, 30, 32, 1}).find("hidden"), std::string::npos);
  std::cout << t << "\n" << p;
}

}  // namespace
}  // namespace mxmoe
