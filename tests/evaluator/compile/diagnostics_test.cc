// The parser against output captured from nvcc 13.0 (cudafe, gcc, the
// assembler, ptxas, nvlink, ld), with the temp names nvcc really printed.
#include "kforge/evaluator/diagnostics.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace kforge::eval {
namespace {

ParseOptions Options() {
  ParseOptions o;
  o.source_paths = {"k.cu", "/cache/kernels/.tmp-ab12-XYZ/k.cu"};
  o.display_name = "candidate.cu";
  return o;
}

TEST(DiagnosticsTest, FrontEndErrorsWithCaretColumnsAndNoSummary) {
  const char* text =
      "k.cu(4): error: identifier \"undefined_x\" is undefined\n"
      "    if (i < n) b[i] = a[i] + undefined_x;\n"
      "                             ^\n"
      "\n"
      "k.cu(6): error: expected a \";\"\n"
      "  extern \"C\" int kf_run(kf_ctx* ctx) { int unused; return 0 }\n"
      "                                                            ^\n"
      "\n"
      "2 errors detected in the compilation of \"k.cu\".\n";
  std::vector<Diagnostic> d = ParseDiagnostics(text, Options());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].file, "candidate.cu");
  EXPECT_EQ(d[0].line, 4);
  EXPECT_EQ(d[0].column, 28);
  EXPECT_EQ(d[0].severity, Severity::kError);
  EXPECT_EQ(d[0].message, "identifier \"undefined_x\" is undefined");
  EXPECT_EQ(d[0].context,
            "    if (i < n) b[i] = a[i] + undefined_x;\n"
            "                             ^");
  EXPECT_EQ(d[1].line, 6);
  EXPECT_EQ(d[1].column, 59);
  EXPECT_EQ(d[1].message, "expected a \";\"");
}

TEST(DiagnosticsTest, RepeatedWarningsAcrossPassesAreKeptOnce) {
  const char* once =
      "/cache/kernels/.tmp-ab12-XYZ/k.cu(3): warning #177-D: variable \"unused\" was declared but "
      "never referenced\n"
      "    int unused = 3;\n"
      "        ^\n"
      "\n"
      "Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n"
      "\n";
  std::vector<Diagnostic> d = ParseDiagnostics(std::string(once) + once, Options());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].file, "candidate.cu");
  EXPECT_EQ(d[0].severity, Severity::kWarning);
  EXPECT_EQ(d[0].column, 7);
  EXPECT_EQ(d[0].message, "variable \"unused\" was declared but never referenced");
}

TEST(DiagnosticsTest, InstantiationNotesStayWithTheirError) {
  const char* text =
      "k.cu(2): error: expression must have class type but it has type \"int\"\n"
      "  template <typename T> int f(T t) { return t.nope(); }\n"
      "                                            ^\n"
      "          detected during instantiation of \"int f(T) [with T=int]\" at line 3\n"
      "\n"
      "1 error detected in the compilation of \"k.cu\".\n";
  std::vector<Diagnostic> d = ParseDiagnostics(text, Options());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].line, 2);
  EXPECT_EQ(d[0].column, 43);
  EXPECT_NE(
      d[0].context.find("detected during instantiation of \"int f(T) [with T=int]\" at line 3"),
      std::string::npos);
}

TEST(DiagnosticsTest, HostCompilerAndAssemblerFormats) {
  const char* text =
      "k.cu:2:2: error: #error boom here\n"
      "    2 | #error boom here\n"
      "      |  ^~~~~\n"
      "k.cu:1:10: fatal error: kforge/nothere.h: No such file or directory\n"
      "    1 | #include <kforge/nothere.h>\n"
      "      |          ^~~~~~~~~~~~~~~~~~\n"
      "compilation terminated.\n"
      "k.cu: Assembler messages:\n"
      "k.cu:3: Error: no such instruction: `bogus_instruction %eax'\n"
      "/usr/include/x.h:7:3: warning: something in a header\n";
  std::vector<Diagnostic> d = ParseDiagnostics(text, Options());
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].file, "candidate.cu");
  EXPECT_EQ(d[0].line, 2);
  EXPECT_EQ(d[0].column, 2);
  EXPECT_EQ(d[0].message, "#error boom here");
  EXPECT_EQ(d[0].context, "    2 | #error boom here\n      |  ^~~~~");
  EXPECT_EQ(d[1].severity, Severity::kError);
  EXPECT_EQ(d[1].message, "kforge/nothere.h: No such file or directory");
  EXPECT_EQ(d[2].line, 3);
  EXPECT_EQ(d[2].column, 0);
  EXPECT_EQ(d[2].severity, Severity::kError);
  EXPECT_EQ(d[2].message, "no such instruction: `bogus_instruction %eax'");
  EXPECT_EQ(d[3].file, "/usr/include/x.h");
  EXPECT_EQ(d[3].severity, Severity::kWarning);
}

TEST(DiagnosticsTest, PtxasNvlinkNvccAndLinkerLines) {
  const char* text =
      "ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x61a80 bytes, 0x38c00 "
      "max)\n"
      "ptxas fatal   : Unresolved extern function '_Z7ext_devi'\n"
      "ptxas /tmp/tmpxft_01-6.ptx, line 12; error   : Unknown symbol 'foo'\n"
      "nvlink error   : Undefined reference to '_Z7ext_devi' in "
      "'/tmp/tmpxft_00003112_00000000-13_k.o'\n"
      "nvcc warning : incompatible redefinition for option 'gpu-architecture', the last value of "
      "this option was used\n"
      "nvcc fatal   : Unsupported gpu architecture 'sm_999'\n"
      "/usr/bin/ld: cannot find -lnosuchlib: No such file or directory\n"
      "/usr/bin/ld: /tmp/tmpxft_000031ac_00000000-11_k.o: in function `kf_run':\n"
      "tmpxft_000031ac_00000000-6_k.cudafe1.cpp:(.text+0x33): undefined reference to "
      "`missing_fn()'\n"
      "collect2: error: ld returned 1 exit status\n";
  std::vector<Diagnostic> d = ParseDiagnostics(text, Options());
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(
      d[0].message,
      "ptxas: Entry function 'big(float*)' uses too much shared data (0x61a80 bytes, 0x38c00 max)");
  EXPECT_EQ(d[0].severity, Severity::kError);
  EXPECT_EQ(d[0].file, "");
  EXPECT_EQ(d[1].message, "ptxas: Unresolved extern function 'ext_dev(int)'");
  EXPECT_EQ(d[2].message, "ptxas: Unknown symbol 'foo'");
  EXPECT_EQ(
      d[3].message,
      "nvlink: Undefined reference to 'ext_dev(int)' in '/tmp/tmpxft_00003112_00000000-13_k.o'");
  EXPECT_EQ(d[4].severity, Severity::kWarning);
  EXPECT_EQ(d[5].message, "nvcc: Unsupported gpu architecture 'sm_999'");
  EXPECT_EQ(d[5].severity, Severity::kError);
  EXPECT_EQ(d[6].message, "ld: cannot find -lnosuchlib: No such file or directory");
  EXPECT_EQ(d[7].message, "undefined reference to 'missing_fn()'");
  for (const Diagnostic& item : d) EXPECT_EQ(item.line, 0) << item.message;
}

TEST(DiagnosticsTest, EmptyAndUnrecognisedTextGivesNothing) {
  EXPECT_TRUE(ParseDiagnostics("", Options()).empty());
  EXPECT_TRUE(ParseDiagnostics("just some chatter\nmore\n", Options()).empty());
}

TEST(DiagnosticsTest, FormatShowsTheOffendingLinesFirstErrorsOnly) {
  std::string source = "int a;\n\tint b = c;\nint d = e;\nint f = g;\n";
  std::vector<Diagnostic> items(4);
  items[0] = {"candidate.cu", 1, 5, Severity::kWarning, "unused a", ""};
  items[1] = {"candidate.cu", 2, 10, Severity::kError, "identifier \"c\" is undefined", ""};
  items[2] = {"candidate.cu", 3, 9, Severity::kError, "identifier \"e\" is undefined", ""};
  items[3] = {"candidate.cu", 4, 9, Severity::kError, "identifier \"g\" is undefined", ""};
  std::string out = FormatDiagnostics(items, source, 2, "candidate.cu");
  EXPECT_EQ(out,
            "candidate.cu:2:10: error: identifier \"c\" is undefined\n"
            "  2 | \tint b = c;\n"
            "    | \t        ^\n"
            "candidate.cu:3:9: error: identifier \"e\" is undefined\n"
            "  3 | int d = e;\n"
            "    |         ^\n"
            "(1 more error not shown)\n");
  // No errors: the warnings are shown instead.
  std::vector<Diagnostic> warnings = {items[0]};
  EXPECT_EQ(FormatDiagnostics(warnings, source, 5, "candidate.cu"),
            "candidate.cu:1:5: warning: unused a\n  1 | int a;\n    |     ^\n");
  // Items without a location, or in other files, show what the tool printed.
  std::vector<Diagnostic> tool = {
      {"", 0, 0, Severity::kError, "ptxas: too much shared data", ""},
      {"kforge/kernel.h", 9, 0, Severity::kError, "bad", "  echo\n  ^"}};
  EXPECT_EQ(
      FormatDiagnostics(tool, source, 5, "candidate.cu"),
      "error: ptxas: too much shared data\nkforge/kernel.h:9: error: bad\n      echo\n      ^\n");
  EXPECT_EQ(FormatDiagnostics({}, source, 5, "candidate.cu"), "");
}

TEST(DiagnosticsTest, JsonHasTheResultSchemaFields) {
  Diagnostic d{"candidate.cu", 12, 5, Severity::kRemark, "m", "ctx"};
  nlohmann::json j = d.ToJson();
  EXPECT_EQ(j, nlohmann::json({{"file", "candidate.cu"},
                               {"line", 12},
                               {"column", 5},
                               {"severity", "remark"},
                               {"message", "m"}}));
}

// A "#line" directive in a kernel puts any number into the compiler's output;
// std::stoi threw on one past INT_MAX.
TEST(DiagnosticsTest, HugeLineNumbersSaturate) {
  std::vector<Diagnostic> d = ParseDiagnostics(
      "k.cu(99999999999999999999): error: expected a \";\"\n"
      "k.cu:4294967296:18446744073709551617: warning: w\n",
      Options());
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].line, 2147483647);
  EXPECT_EQ(d[0].message, "expected a \";\"");
  EXPECT_EQ(d[1].line, 2147483647);
  EXPECT_EQ(d[1].column, 2147483647);
}

// Compiler logs built to defeat a backtracking matcher (the kernel's source is
// echoed into them) are parsed in one pass per line, with the same results.
std::string Repeat(std::string_view piece, size_t bytes) {
  std::string out;
  out.reserve(bytes + piece.size());
  while (out.size() < bytes) out.append(piece);
  return out;
}

TEST(DiagnosticsTest, AdversarialHeaderLines) {
  std::string log;
  log += Repeat("(1", 4000) + "(7): error: after many parentheses\n";
  log += Repeat("a:1", 4000) + ":9: warning: after many colons\n";
  log += "ptxas " + Repeat(", line 1", 4000) + ", line 5; error : after many commas\n";
  log += Repeat("/ld", 4000) + "/ld.gold: warning: after many slashes\n";
  log += "x: undefined reference to `" + Repeat("_Z", 4000) + "'\n";
  // Not headers, so context of the last one: a quote never closed, nothing
  // that fits, and a line too long to be a header.
  std::string context = "'" + Repeat("_Z1", 4000) + "\n" + Repeat("(", 4000) + "\n" +
                        Repeat(":", 4000) + "\n" + Repeat("x(1): error: ", 1 << 20);
  log += context + "\n";
  std::vector<Diagnostic> d = ParseDiagnostics(log, Options());
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0].file, Repeat("(1", 4000));
  EXPECT_EQ(d[0].line, 7);
  EXPECT_EQ(d[0].message, "after many parentheses");
  std::string colons = Repeat("a:1", 4000);
  EXPECT_EQ(d[1].file, colons.substr(0, colons.size() - 2));  // the shortest file that fits
  EXPECT_EQ(d[1].line, 1);
  EXPECT_EQ(d[1].column, 9);
  EXPECT_EQ(d[1].severity, Severity::kWarning);
  EXPECT_EQ(d[2].message, "ptxas: after many commas");
  EXPECT_EQ(d[3].message, "ld: after many slashes");
  EXPECT_EQ(d[3].severity, Severity::kWarning);
  EXPECT_EQ(d[4].message, "undefined reference to '" + Repeat("_Z", 4000) + "'");
  EXPECT_EQ(d[4].context, context);
}

}  // namespace
}  // namespace kforge::eval
