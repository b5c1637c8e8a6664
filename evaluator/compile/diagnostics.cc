#include "kforge/evaluator/diagnostics.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>
#include <tuple>

namespace kforge::eval {
namespace {

// Lines longer than this are never diagnostic headers (template soup); they can
// still be context. Bounds the regex work on pathological logs.
constexpr size_t kMaxHeaderLine = 4096;

std::optional<Severity> SeverityFromWord(std::string word) {
  for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (word == "error" || word == "fatal error" || word == "catastrophic error" ||
      word == "internal error" || word == "fatal") {
    return Severity::kError;
  }
  if (word == "warning") return Severity::kWarning;
  if (word == "note") return Severity::kNote;
  if (word == "remark") return Severity::kRemark;
  return std::nullopt;
}

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// Replaces quoted mangled C++ names ('_Z...') with their demangled form, so
// ptxas and linker messages read like the source.
std::string DemangleQuoted(std::string text) {
  static const std::regex kMangled("'(_Z[A-Za-z0-9_]+)'");
  std::string out;
  auto begin = std::sregex_iterator(text.begin(), text.end(), kMangled);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out.append(text, last, m.position(0) - last);
    int status = 0;
    char* plain = abi::__cxa_demangle(m[1].str().c_str(), nullptr, nullptr, &status);
    out += "'" + (status == 0 && plain != nullptr ? std::string(plain) : m[1].str()) + "'";
    std::free(plain);
    last = m.position(0) + m.length(0);
  }
  out.append(text, last, std::string::npos);
  return out;
}

bool IsNoise(std::string_view line) {
  static const std::regex kNoise(
      R"(^(\d+ errors? detected in the compilation of .*|Remark: The warnings can be suppressed.*|)"
      R"(compilation terminated\.|Compilation terminated\.|.*: Assembler messages:|In file included from .*|\s+from .*[:,]|)"
      R"(.*: In (member )?function .*|.*: In instantiation of .*|.*: At global scope:|)"
      R"(collect2: error: ld returned \d+ exit status|.*ld(\.\w+)?: .*: in function .*)$)");
  return std::regex_match(line.begin(), line.end(), kNoise);
}

// The front end echoes the source line indented by two spaces and puts a caret
// under the offending token on the next line; it prints no column, so it is
// recovered from the caret.
void ColumnFromCaret(Diagnostic& d) {
  size_t nl = d.context.find('\n');
  if (d.column != 0 || nl == std::string::npos) return;
  std::string_view echo(d.context.data(), nl);
  std::string_view caret(d.context.data() + nl + 1, d.context.size() - nl - 1);
  caret = caret.substr(0, caret.find('\n'));
  size_t at = caret.find('^');
  if (at == std::string_view::npos || at < 2 || echo.substr(0, 2) != "  ") return;
  if (caret.find_first_not_of(' ') != at) return;
  d.column = static_cast<int>(at - 2) + 1;
}

class Parser {
 public:
  explicit Parser(const ParseOptions& options) : options_(options) {}

  void Line(std::string_view raw) {
    std::string line(raw);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (Trim(line).empty()) {
      Close();
      return;
    }
    if (line.size() <= kMaxHeaderLine) {
      if (IsNoise(line)) {
        Close();
        return;
      }
      bool edg = false;
      if (std::optional<Diagnostic> d = Header(line, edg)) {
        Close();
        items_.push_back(std::move(*d));
        open_ = static_cast<int>(items_.size()) - 1;
        open_is_edg_ = edg;
        return;
      }
    }
    if (open_ >= 0) {
      std::string& context = items_[open_].context;
      if (!context.empty()) context += '\n';
      context += line;
    }
  }

  std::vector<Diagnostic> Finish() {
    Close();
    std::vector<Diagnostic> unique;
    std::set<std::tuple<std::string, int, int, int, std::string>> seen;
    for (Diagnostic& d : items_) {
      if (seen.emplace(d.file, d.line, d.column, static_cast<int>(d.severity), d.message).second) {
        unique.push_back(std::move(d));
      }
    }
    return unique;
  }

 private:
  std::string NormalizeFile(std::string file) const {
    for (const std::string& p : options_.source_paths) {
      if (file == p || file == "./" + p) return options_.display_name;
    }
    return file;
  }

  // Ends the open item's continuation lines.
  void Close() {
    if (open_ >= 0 && open_is_edg_) ColumnFromCaret(items_[open_]);
    open_ = -1;
  }

  std::optional<Diagnostic> Header(const std::string& line, bool& edg) {
    static const std::regex kEdg(
        R"(^(.+?)\((\d+)\): (catastrophic error|internal error|error|warning|remark|note)(?: #\d+(?:-[A-Z])?)?: (.*)$)");
    // The assembler prints "Error:" / "Warning:" with a capital.
    static const std::regex kGcc(
        R"(^(.+?):(\d+):(?:(\d+):)? (fatal error|error|warning|note|Error|Warning): (.*)$)");
    static const std::regex kPtxasAt(
        R"(^ptxas (.+?), line (\d+); (fatal|error|warning)\s*: (.*)$)");
    static const std::regex kTool(
        R"(^(ptxas|nvlink|nvcc|fatbinary|cicc|cudafe\+\+|nvdisasm)\s+(fatal|error|warning)\s*: (.*)$)");
    static const std::regex kUndefined(R"(undefined reference to [`']([^']+)')");
    static const std::regex kLd(
        R"(^(?:\S*/)?(?:ld|ld\.bfd|ld\.gold|ld\.lld)(?:\.\w+)?: (warning: )?(.*)$)");
    std::smatch m;
    // The undefined-reference test comes first: its lines also look like "file:NN: ...".
    if (std::regex_search(line, m, kUndefined)) {
      return Make("", 0, 0, Severity::kError,
                  DemangleQuoted("undefined reference to '" + m[1].str() + "'"));
    }
    if (std::regex_match(line, m, kEdg)) {
      edg = true;
      return Make(NormalizeFile(m[1]), std::stoi(m[2]), 0, *SeverityFromWord(m[3].str()), m[4]);
    }
    if (std::regex_match(line, m, kPtxasAt)) {
      return Make("", 0, 0, *SeverityFromWord(m[3].str()), DemangleQuoted("ptxas: " + m[4].str()));
    }
    if (std::regex_match(line, m, kTool)) {
      return Make("", 0, 0, *SeverityFromWord(m[2].str()),
                  DemangleQuoted(m[1].str() + ": " + m[3].str()));
    }
    if (std::regex_match(line, m, kGcc)) {
      return Make(NormalizeFile(m[1]), std::stoi(m[2]), m[3].matched ? std::stoi(m[3]) : 0,
                  *SeverityFromWord(m[4].str()), m[5]);
    }
    if (std::regex_match(line, m, kLd)) {
      return Make("", 0, 0, m[1].matched ? Severity::kWarning : Severity::kError,
                  DemangleQuoted("ld: " + m[2].str()));
    }
    return std::nullopt;
  }

  static Diagnostic Make(std::string file, int line, int column, Severity severity,
                         std::string message) {
    Diagnostic d;
    d.file = std::move(file);
    d.line = line;
    d.column = column;
    d.severity = severity;
    d.message = Trim(message);
    return d;
  }

  const ParseOptions& options_;
  std::vector<Diagnostic> items_;
  int open_ = -1;  // the item that continuation lines attach to
  bool open_is_edg_ = false;
};

std::string_view SourceLine(std::string_view source, int line) {
  if (line <= 0) return {};
  size_t start = 0;
  for (int i = 1; i < line; ++i) {
    size_t nl = source.find('\n', start);
    if (nl == std::string_view::npos) return {};
    start = nl + 1;
  }
  size_t end = source.find('\n', start);
  std::string_view out =
      source.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
  if (!out.empty() && out.back() == '\r') out.remove_suffix(1);
  return out;
}

}  // namespace

std::string_view SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kNote:
      return "note";
    case Severity::kRemark:
      return "remark";
  }
  return "error";
}

nlohmann::json Diagnostic::ToJson() const {
  return {{"file", file},
          {"line", line},
          {"column", column},
          {"severity", SeverityName(severity)},
          {"message", message}};
}

std::vector<Diagnostic> ParseDiagnostics(std::string_view text, const ParseOptions& options) {
  Parser parser(options);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    parser.Line(text.substr(start, end - start));
    start = end + 1;
  }
  return parser.Finish();
}

std::string FormatDiagnostics(const std::vector<Diagnostic>& items, std::string_view source,
                              size_t max_items, std::string_view display_name) {
  Severity shown = Severity::kError;
  size_t total = std::count_if(items.begin(), items.end(),
                               [](const Diagnostic& d) { return d.severity == Severity::kError; });
  if (total == 0) {
    shown = Severity::kWarning;
    total = std::count_if(items.begin(), items.end(),
                          [](const Diagnostic& d) { return d.severity == Severity::kWarning; });
  }
  std::string out;
  size_t printed = 0;
  for (const Diagnostic& d : items) {
    if (d.severity != shown) continue;
    if (printed == max_items) break;
    ++printed;
    if (!d.file.empty()) {
      out += d.file;
      if (d.line > 0) out += fmt::format(":{}", d.line);
      if (d.column > 0) out += fmt::format(":{}", d.column);
      out += ": ";
    }
    out += fmt::format("{}: {}\n", SeverityName(d.severity), d.message);
    std::string_view text =
        d.file == display_name ? SourceLine(source, d.line) : std::string_view();
    if (!text.empty()) {
      std::string number = std::to_string(d.line);
      out += fmt::format("  {} | {}\n", number, text);
      if (d.column > 0 && static_cast<size_t>(d.column) <= text.size() + 1) {
        // Keep tabs so the caret lines up under the same terminal columns.
        std::string pad;
        for (size_t i = 0; i + 1 < static_cast<size_t>(d.column); ++i)
          pad += text[i] == '\t' ? '\t' : ' ';
        out += fmt::format("  {} | {}^\n", std::string(number.size(), ' '), pad);
      }
    } else if (!d.context.empty()) {
      // Another file (a header) or a tool message: show what the tool printed, briefly.
      size_t start = 0;
      for (int n = 0; n < 3 && start < d.context.size(); ++n) {
        size_t end = d.context.find('\n', start);
        if (end == std::string::npos) end = d.context.size();
        out += "    " + d.context.substr(start, end - start) + "\n";
        start = end + 1;
      }
    }
  }
  if (total > printed) {
    out += fmt::format("({} more {}{} not shown)\n", total - printed, SeverityName(shown),
                       total - printed == 1 ? "" : "s");
  }
  return out;
}

}  // namespace kforge::eval
