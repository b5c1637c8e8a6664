#include "web/html.h"

namespace kforge::results {

namespace {

// One stylesheet for every page; light and print friendly.
constexpr std::string_view kStyle = R"css(
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1200px;color:#1d2330;padding:0 16px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:8px 0;font-size:.92em}
th,td{border-bottom:1px solid #d9dde5;padding:4px 10px;text-align:right;white-space:nowrap}
th{background:#f2f4f8}td.l,th.l{text-align:left}
tr.emulated td{color:#7a5a00;background:#fff8e1}
tr.not-evaluated td{color:#8a8f99;font-style:italic}
.table-wrap{overflow-x:auto;max-width:100%}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:.8em;background:#eef}
.tag.emulated{background:#ffe08a}.tag.passed{background:#c8f0c8}.tag.failed{background:#f6c6c6}
.note{color:#5a6170;font-size:.9em}
.banner{background:#fff4d6;border:1px solid #e8c36a;padding:8px 12px;border-radius:4px}
pre{background:#f7f8fa;border:1px solid #e1e4ea;padding:8px;overflow-x:auto;font-size:.85em;white-space:pre-wrap}
pre.code{white-space:pre}
.kw{color:#0033b3;font-weight:600}.ty{color:#00627a}.cu{color:#8a1bb5;font-weight:600}.str{color:#067d17}
.com{color:#8c8c8c;font-style:italic}.num{color:#1750eb}.pp{color:#9e5a00}
.diff .add{background:#e6ffec;display:block}.diff .del{background:#ffebe9;display:block}.diff .ctx{display:block}
.charts{display:flex;flex-wrap:wrap;gap:16px}
svg.chart{background:#fff;border:1px solid #e1e4ea}
svg.chart text{font-size:11px;fill:#333}svg.chart .axis{stroke:#888}svg.chart .grid{stroke:#eee}
a{color:#0b5cad;text-decoration:none}a:hover{text-decoration:underline}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.turn{border-left:3px solid #c9d3e6;padding-left:12px;margin:18px 0}
)css";

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string HtmlDocument(std::string_view title, std::string_view body, std::string_view script) {
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>";
  page += HtmlEscape(title);
  page += "</title><style>";
  page += kStyle;
  page += "</style></head><body>\n";
  page += body;
  if (!script.empty()) {
    page += "\n<script>";
    page += script;
    page += "</script>";
  }
  page += "\n</body></html>\n";
  return page;
}

}  // namespace kforge::results
