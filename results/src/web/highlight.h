// CUDA/C++ syntax highlighting as HTML spans (classes kw, ty, cu, str, com,
// num, pp), from a small tokenizer: good enough to read a kernel, not a parser.
#pragma once

#include <string>
#include <string_view>

namespace kforge::results {

// Escaped, highlighted source, for use inside <pre class="code">.
std::string HighlightCuda(std::string_view source);

}  // namespace kforge::results
