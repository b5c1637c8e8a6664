// Line diff between two texts (successive kernels of a session).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kforge::results {

struct DiffLine {
  enum class Kind { kSame, kAdded, kRemoved };
  Kind kind;
  std::string text;
};

// A shortest edit script over lines (longest common subsequence). Inputs past
// 4000 lines each fall back to "all removed, all added" to bound the cost.
std::vector<DiffLine> DiffLines(std::string_view before, std::string_view after);

// Unified-style text: "  same", "- removed", "+ added"; runs of unchanged
// lines longer than 2*context are folded to "  …". Equal texts give "".
std::string UnifiedDiff(const std::vector<DiffLine>& diff, int context = 3);

// The same as HTML (<pre class="diff"> with add/del/ctx spans).
std::string DiffHtml(const std::vector<DiffLine>& diff, int context = 3);

}  // namespace kforge::results
