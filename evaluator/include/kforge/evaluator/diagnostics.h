// Compiler diagnostics: nvcc's mixed output (the EDG front end "cudafe", the
// host gcc, ptxas, nvlink, the host linker) parsed into uniform items, and
// rendered compactly for feeding back to a model.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kforge::eval {

enum class Severity { kError, kWarning, kNote, kRemark };

// "error" | "warning" | "note" | "remark".
std::string_view SeverityName(Severity severity);

struct Diagnostic {
  std::string file;  // the kernel's display name, another file as printed, or "" (ptxas, linkers)
  int line = 0;      // 1-based; 0 when the tool gives none
  int column = 0;    // 1-based; 0 when unknown
  Severity severity = Severity::kError;
  std::string message;  // the tool's message, without the location and severity prefix
  std::string context;  // continuation lines (source echo, caret, instantiation notes), '\n'-joined

  bool operator==(const Diagnostic&) const = default;
  // The `compile.diagnostics[]` item of docs/eval-result.md (context is not part of it).
  nlohmann::json ToJson() const;
};

struct ParseOptions {
  // Paths under which the tools saw the kernel's source (a temporary file);
  // diagnostics naming any of them are renamed to display_name.
  std::vector<std::string> source_paths;
  std::string display_name = "kernel.cu";
};

// Parses everything nvcc and its sub-tools print. Lines that are no diagnostic
// and follow one (up to a blank line) become its context. Identical items
// (same file, line, column, severity and message: nvcc repeats front-end errors
// across its host and device passes) are kept once, in first-seen order.
std::vector<Diagnostic> ParseDiagnostics(std::string_view text, const ParseOptions& options);

// The line to print under `source_line` so that a '^' sits under its 1-based
// `column`: the text before the column with every character but a tab turned
// into a space (tabs stay, so the caret lines up however wide a tab is shown),
// then '^'. Empty when column is 0 (unknown) or past the end of the line + 1.
std::string CaretLine(std::string_view source_line, int column);

// Renders up to max_items errors (or, when there are none, warnings) in the
// gcc style "file:line:col: error: message", each followed by the offending
// line of `source` and a caret when the item names the kernel's display name,
// then "(N more errors not shown)" when some were left out. Empty when there
// is nothing to show.
std::string FormatDiagnostics(const std::vector<Diagnostic>& items, std::string_view source,
                              size_t max_items, std::string_view display_name = "kernel.cu");

}  // namespace kforge::eval
