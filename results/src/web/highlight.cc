#include "web/highlight.h"

#include <cctype>
#include <set>

#include "web/html.h"

namespace kforge::results {

namespace {

const std::set<std::string_view>& Keywords() {
  static const std::set<std::string_view> k = {"if",
                                               "else",
                                               "for",
                                               "while",
                                               "do",
                                               "return",
                                               "break",
                                               "continue",
                                               "switch",
                                               "case",
                                               "default",
                                               "struct",
                                               "class",
                                               "template",
                                               "typename",
                                               "namespace",
                                               "using",
                                               "const",
                                               "constexpr",
                                               "static",
                                               "extern",
                                               "inline",
                                               "volatile",
                                               "sizeof",
                                               "auto",
                                               "true",
                                               "false",
                                               "nullptr",
                                               "goto",
                                               "enum",
                                               "public",
                                               "private",
                                               "static_assert",
                                               "reinterpret_cast",
                                               "static_cast",
                                               "asm"};
  return k;
}

const std::set<std::string_view>& Types() {
  static const std::set<std::string_view> t = {
      "void",    "int",    "unsigned",     "float",       "double",        "char",     "bool",
      "long",    "short",  "size_t",       "int64_t",     "int32_t",       "uint32_t", "uint64_t",
      "uint8_t", "int8_t", "half",         "__half",      "__nv_bfloat16", "float2",   "float4",
      "int4",    "dim3",   "cudaStream_t", "cudaError_t", "ncclComm_t"};
  return t;
}

bool IsCudaWord(std::string_view w) {
  static const std::set<std::string_view> c = {
      "__global__",        "__device__",   "__host__",      "__shared__",
      "__constant__",      "__restrict__", "__syncthreads", "__forceinline__",
      "__launch_bounds__", "threadIdx",    "blockIdx",      "blockDim",
      "gridDim",           "warpSize",     "__shfl_sync",   "__shfl_xor_sync",
      "__syncwarp",        "atomicAdd",    "atomicCAS",     "__threadfence_system",
      "__threadfence"};
  return c.count(w) > 0;
}

void Span(std::string& out, const char* cls, std::string_view text) {
  out += "<span class=\"";
  out += cls;
  out += "\">";
  out += HtmlEscape(text);
  out += "</span>";
}

}  // namespace

std::string HighlightCuda(std::string_view src) {
  std::string out;
  size_t i = 0;
  const size_t n = src.size();
  bool line_start = true;
  while (i < n) {
    const char c = src[i];
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      size_t e = src.find('\n', i);
      if (e == std::string_view::npos) e = n;
      Span(out, "com", src.substr(i, e - i));
      i = e;
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      size_t e = src.find("*/", i + 2);
      e = e == std::string_view::npos ? n : e + 2;
      Span(out, "com", src.substr(i, e - i));
      i = e;
    } else if (c == '#' && line_start) {
      size_t e = src.find('\n', i);
      if (e == std::string_view::npos) e = n;
      Span(out, "pp", src.substr(i, e - i));
      i = e;
    } else if (c == '"' || c == '\'') {
      size_t e = i + 1;
      while (e < n && src[e] != c && src[e] != '\n') e += src[e] == '\\' ? 2 : 1;
      e = std::min(n, e + 1);
      Span(out, "str", src.substr(i, e - i));
      i = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = i;
      while (e < n &&
             (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '.' || src[e] == '\''))
        ++e;
      Span(out, "num", src.substr(i, e - i));
      i = e;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = i;
      while (e < n && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
      const std::string_view w = src.substr(i, e - i);
      if (IsCudaWord(w)) {
        Span(out, "cu", w);
      } else if (Keywords().count(w)) {
        Span(out, "kw", w);
      } else if (Types().count(w)) {
        Span(out, "ty", w);
      } else {
        out += HtmlEscape(w);
      }
      i = e;
    } else {
      out += HtmlEscape(src.substr(i, 1));
      ++i;
    }
    if (i > 0 && i <= n)
      line_start = src[i - 1] == '\n' || (line_start && (src[i - 1] == ' ' || src[i - 1] == '\t'));
  }
  return out;
}

}  // namespace kforge::results
