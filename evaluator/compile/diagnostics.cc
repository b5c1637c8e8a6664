#include "kforge/evaluator/diagnostics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "demangle.h"
#include "kforge/core/scan.h"
#include "kforge/core/strings.h"

namespace kforge::eval {
namespace {

// Lines longer than this are never diagnostic headers (template soup); they can
// still be context. Bounds the work on pathological logs.
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

// Replaces quoted mangled C++ names ('_Z' and word characters, in single
// quotes) with their demangled form, so ptxas and linker messages read like
// the source.
std::string DemangleQuoted(std::string_view text) {
  std::string out;
  size_t last = 0;  // text before `last` is in `out`
  for (size_t open = text.find('\''); open != std::string_view::npos;
       open = text.find('\'', open + 1)) {
    if (!scan::At(text, open + 1, "_Z")) continue;
    size_t close = scan::SkipWhile(text, open + 3, scan::IsWordChar);
    if (close == open + 3 || close == text.size() || text[close] != '\'') continue;
    out.append(text.substr(last, open - last));
    out += "'" + Demangle(text.substr(open + 1, close - open - 1)) + "'";
    last = close + 1;
    open = close;  // matches do not overlap
  }
  out.append(text.substr(last));
  return out;
}

// One line, with where it holds a line break ('\r'; what the old patterns'
// "." refused to match) found once, so that every check below is one pass.
class LineView {
 public:
  explicit LineView(std::string_view text)
      : text_(text),
        first_break_(text.find_first_of("\r\n")),
        last_break_(text.find_last_of("\r\n")) {}
  std::string_view text() const { return text_; }
  // Whether text[0, end) holds no line break.
  bool PlainPrefix(size_t end) const { return first_break_ == kNone || first_break_ >= end; }
  // Whether text[begin, size) holds no line break.
  bool PlainSuffix(size_t begin) const { return last_break_ == kNone || last_break_ < begin; }
  bool Plain() const { return first_break_ == kNone; }
  bool At(size_t at, std::string_view word) const { return scan::At(text_, at, word); }
  bool Contains(std::string_view word) const { return text_.find(word) != kNone; }
  // The end of the run of digits at `at` (== at when there is none).
  size_t Digits(size_t at) const { return scan::SkipWhile(text_, at, scan::IsDigit); }
  // The end of the first of `words` found at `at`, or npos.
  size_t OneOf(size_t at, std::initializer_list<std::string_view> words) const {
    for (std::string_view w : words) {
      if (At(at, w)) return at + w.size();
    }
    return kNone;
  }

  static constexpr size_t kNone = std::string_view::npos;

 private:
  std::string_view text_;
  size_t first_break_, last_break_;
};

// "ld", then an optional ".word", then ": " at `at`; with `variants`, "ld.bfd",
// "ld.gold" and "ld.lld" may take the ".word" too. The index after ": ", or npos.
size_t AfterLinkerName(const LineView& l, size_t at, bool variants) {
  if (!l.At(at, "ld")) return LineView::kNone;
  size_t p = at + 2;
  for (int segment = 0; segment < (variants ? 2 : 1); ++segment) {
    if (l.At(p, ": ")) return p + 2;
    if (!l.At(p, ".")) return LineView::kNone;
    size_t end = scan::SkipWhile(l.text(), p + 1, scan::IsWordChar);
    if (end == p + 1) return LineView::kNone;
    std::string_view word = l.text().substr(p + 1, end - p - 1);
    p = end;
    if (word != "bfd" && word != "gold" && word != "lld") break;
  }
  return l.At(p, ": ") ? p + 2 : LineView::kNone;
}

// "…ld(.word): …: in function …": the linker's "file.o: in function `f':" lead-in.
bool IsLinkerFunctionLine(const LineView& l) {
  size_t last_in_function = l.text().rfind(": in function ");
  if (last_in_function == LineView::kNone) return false;
  for (size_t at = l.text().find("ld"); at != LineView::kNone; at = l.text().find("ld", at + 1)) {
    size_t after = AfterLinkerName(l, at, false);
    if (after != LineView::kNone) return after <= last_in_function;
  }
  return false;
}

// The compiler drivers' chatter that is no diagnostic of its own: summaries,
// include stacks, "In function" lead-ins, the assembler's banner.
bool IsNoise(std::string_view text) {
  LineView l(text);
  // "<white space>from <file>:" (or ",") continues an include stack.
  size_t lead = scan::SkipWhile(text, 0, scan::IsSpace);
  if (lead > 0 && l.At(lead, "from ") && text.size() > lead + 5 &&
      (text.back() == ':' || text.back() == ',') && l.PlainSuffix(lead)) {
    return true;
  }
  if (!l.Plain()) return false;
  if (text == "compilation terminated." || text == "Compilation terminated.") return true;
  if (l.At(0, "Remark: The warnings can be suppressed") || l.At(0, "In file included from ")) {
    return true;
  }
  if (text.ends_with(": Assembler messages:") || text.ends_with(": At global scope:")) return true;
  if (l.Contains(": In function ") || l.Contains(": In member function ") ||
      l.Contains(": In instantiation of ")) {
    return true;
  }
  // "<n> error(s) detected in the compilation of …"
  if (size_t n = l.Digits(0); n > 0 && l.At(n, " error")) {
    size_t p = n + 6;
    if (l.At(p, "s")) ++p;
    if (l.At(p, " detected in the compilation of ")) return true;
  }
  // "collect2: error: ld returned <n> exit status"
  constexpr std::string_view kCollect = "collect2: error: ld returned ";
  if (l.At(0, kCollect)) {
    size_t n = l.Digits(kCollect.size());
    if (n > kCollect.size() && text.substr(n) == " exit status") return true;
  }
  return IsLinkerFunctionLine(l);
}

// A decimal line or column number; saturates instead of overflowing, since a
// "#line 99999999999" directive in a kernel reaches the compiler's output.
int ParseCount(std::string_view digits) {
  int64_t v = 0;
  for (char c : digits) v = std::min<int64_t>(v * 10 + (c - '0'), INT_MAX);
  return static_cast<int>(v);
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

  // One header line in any of the tools' formats, or nothing. Each format is
  // a hand-written scanner (std::regex overflowed the stack on long lines).
  std::optional<Diagnostic> Header(const std::string& line, bool& edg) {
    LineView l(line);
    // The undefined-reference test comes first: its lines also look like "file:NN: ...".
    if (std::optional<std::string> name = UndefinedReference(line)) {
      return Make("", 0, 0, Severity::kError,
                  DemangleQuoted("undefined reference to '" + *name + "'"));
    }
    if (std::optional<Diagnostic> d = EdgHeader(l)) {
      edg = true;
      return d;
    }
    if (std::optional<Diagnostic> d = PtxasAtHeader(l)) return d;
    if (std::optional<Diagnostic> d = ToolHeader(l)) return d;
    if (std::optional<Diagnostic> d = GccHeader(l)) return d;
    return LinkerHeader(l);
  }

  // "… undefined reference to `name'" (or 'name'), anywhere in the line.
  static std::optional<std::string> UndefinedReference(std::string_view line) {
    constexpr std::string_view kLead = "undefined reference to ";
    for (size_t at = line.find(kLead); at != LineView::kNone; at = line.find(kLead, at + 1)) {
      size_t open = at + kLead.size();
      if (open == line.size() || (line[open] != '`' && line[open] != '\'')) continue;
      size_t close = line.find('\'', open + 1);
      if (close == LineView::kNone) return std::nullopt;  // no later one closes either
      if (close > open + 1) return std::string(line.substr(open + 1, close - open - 1));
    }
    return std::nullopt;
  }

  // cudafe: "file(NN): error: msg", "file(NN): warning #177-D: msg"; the file
  // is the shortest prefix after which the rest fits.
  std::optional<Diagnostic> EdgHeader(const LineView& l) const {
    if (!l.Plain()) return std::nullopt;
    std::string_view t = l.text();
    for (size_t paren = t.find('(', 1); paren != LineView::kNone; paren = t.find('(', paren + 1)) {
      size_t digits_end = l.Digits(paren + 1);
      if (digits_end == paren + 1 || !l.At(digits_end, "): ")) continue;
      size_t word = digits_end + 3;
      size_t p = l.OneOf(
          word, {"catastrophic error", "internal error", "error", "warning", "remark", "note"});
      if (p == LineView::kNone) continue;
      size_t word_end = p;
      if (l.At(p, " #") && l.Digits(p + 2) > p + 2) {  // " #177", maybe "-D"
        size_t q = l.Digits(p + 2);
        if (l.At(q, "-") && q + 1 < t.size() && scan::IsUpper(t[q + 1])) q += 2;
        if (l.At(q, ": ")) p = q;
      }
      if (!l.At(p, ": ")) continue;
      return Make(NormalizeFile(std::string(t.substr(0, paren))),
                  ParseCount(t.substr(paren + 1, digits_end - paren - 1)), 0,
                  *SeverityFromWord(std::string(t.substr(word, word_end - word))),
                  std::string(t.substr(p + 2)));
    }
    return std::nullopt;
  }

  // "ptxas <file>, line NN; error   : msg"
  static std::optional<Diagnostic> PtxasAtHeader(const LineView& l) {
    if (!l.At(0, "ptxas ")) return std::nullopt;
    std::string_view t = l.text();
    for (size_t comma = t.find(", line ", 7); comma != LineView::kNone;
         comma = t.find(", line ", comma + 1)) {
      if (!l.PlainPrefix(comma)) return std::nullopt;  // the file may hold no break
      size_t digits_end = l.Digits(comma + 7);
      if (digits_end == comma + 7 || !l.At(digits_end, "; ")) continue;
      size_t word = digits_end + 2;
      size_t p = l.OneOf(word, {"fatal", "error", "warning"});
      if (p == LineView::kNone) continue;
      size_t colon = scan::SkipWhile(t, p, scan::IsSpace);
      if (!l.At(colon, ": ") || !l.PlainSuffix(colon + 2)) continue;
      return Make("", 0, 0, *SeverityFromWord(std::string(t.substr(word, p - word))),
                  DemangleQuoted("ptxas: " + std::string(t.substr(colon + 2))));
    }
    return std::nullopt;
  }

  // "nvlink error   : msg", "nvcc fatal   : msg", …
  static std::optional<Diagnostic> ToolHeader(const LineView& l) {
    std::string_view t = l.text();
    size_t tool_end =
        l.OneOf(0, {"ptxas", "nvlink", "nvcc", "fatbinary", "cicc", "cudafe++", "nvdisasm"});
    if (tool_end == LineView::kNone) return std::nullopt;
    size_t word = scan::SkipWhile(t, tool_end, scan::IsSpace);
    if (word == tool_end) return std::nullopt;
    size_t p = l.OneOf(word, {"fatal", "error", "warning"});
    if (p == LineView::kNone) return std::nullopt;
    size_t colon = scan::SkipWhile(t, p, scan::IsSpace);
    if (!l.At(colon, ": ") || !l.PlainSuffix(colon + 2)) return std::nullopt;
    return Make("", 0, 0, *SeverityFromWord(std::string(t.substr(word, p - word))),
                DemangleQuoted(std::string(t.substr(0, tool_end)) + ": " +
                               std::string(t.substr(colon + 2))));
  }

  // gcc and the assembler: "file:NN:CC: error: msg", "file:NN: Error: msg"; the
  // file is the shortest prefix after which the rest fits.
  std::optional<Diagnostic> GccHeader(const LineView& l) const {
    if (!l.Plain()) return std::nullopt;
    std::string_view t = l.text();
    for (size_t colon = t.find(':', 1); colon != LineView::kNone; colon = t.find(':', colon + 1)) {
      size_t line_end = l.Digits(colon + 1);
      if (line_end == colon + 1 || !l.At(line_end, ":")) continue;
      size_t column_end = l.Digits(line_end + 1);
      bool has_column = column_end > line_end + 1 && l.At(column_end, ":");
      size_t space = has_column ? column_end + 1 : line_end + 1;
      if (!l.At(space, " ")) continue;
      size_t word = space + 1;
      size_t p = l.OneOf(word, {"fatal error", "error", "warning", "note", "Error", "Warning"});
      if (p == LineView::kNone || !l.At(p, ": ")) continue;
      return Make(NormalizeFile(std::string(t.substr(0, colon))),
                  ParseCount(t.substr(colon + 1, line_end - colon - 1)),
                  has_column ? ParseCount(t.substr(line_end + 1, column_end - line_end - 1)) : 0,
                  *SeverityFromWord(std::string(t.substr(word, p - word))),
                  std::string(t.substr(p + 2)));
    }
    return std::nullopt;
  }

  // "ld: msg", "/usr/bin/ld.gold: warning: msg". The name is looked for after
  // each '/' of the line's first word, the last first, then at the start.
  static std::optional<Diagnostic> LinkerHeader(const LineView& l) {
    std::string_view t = l.text();
    std::string_view word =
        t.substr(0, scan::SkipWhile(t, 0, [](char c) { return !scan::IsSpace(c); }));
    std::vector<size_t> starts;
    for (size_t slash = word.rfind('/'); slash != LineView::kNone;
         slash = slash == 0 ? LineView::kNone : word.rfind('/', slash - 1)) {
      starts.push_back(slash + 1);
    }
    starts.push_back(0);
    for (size_t start : starts) {
      size_t after = AfterLinkerName(l, start, true);
      if (after == LineView::kNone || !l.PlainSuffix(after)) continue;
      bool warning = l.At(after, "warning: ");
      return Make("", 0, 0, warning ? Severity::kWarning : Severity::kError,
                  DemangleQuoted("ld: " + std::string(t.substr(warning ? after + 9 : after))));
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

std::string CaretLine(std::string_view source_line, int column) {
  if (column <= 0 || static_cast<size_t>(column) > source_line.size() + 1) return "";
  std::string out;
  for (size_t i = 0; i + 1 < static_cast<size_t>(column); ++i)
    out += source_line[i] == '\t' ? '\t' : ' ';
  return out + "^";
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
      if (std::string caret = CaretLine(text, d.column); !caret.empty())
        out += fmt::format("  {} | {}\n", std::string(number.size(), ' '), caret);
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
