#include "extract.h"

#include <fmt/format.h>

#include <vector>

#include "kforge/core/scan.h"
#include "kforge/core/strings.h"

namespace kforge::agent {
namespace {

struct Block {
  std::string lang;
  std::string body;
  bool closed = false;
};

// Fences are lines starting (after indentation) with ``` or ~~~; a block
// closes at the next fence line with the same marker and nothing after it.
std::vector<Block> FindBlocks(std::string_view text) {
  std::vector<Block> blocks;
  Block* open = nullptr;
  std::string marker;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    std::string trimmed = Trim(line);
    bool is_fence = trimmed.rfind("```", 0) == 0 || trimmed.rfind("~~~", 0) == 0;
    if (open == nullptr) {
      if (is_fence) {
        marker = trimmed.substr(0, 3);
        blocks.push_back({});
        open = &blocks.back();
        std::string lang = Trim(std::string_view(trimmed).substr(3));
        for (char& c : lang) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        open->lang = lang.substr(0, lang.find_first_of(" \t{"));
      }
    } else if (is_fence && trimmed == marker) {
      open->closed = true;
      open = nullptr;
    } else {
      open->body.append(line);
      open->body.push_back('\n');
    }
    pos = end + 1;
  }
  return blocks;
}

bool IsCodeLanguage(const std::string& lang) {
  return lang.empty() || lang == "cuda" || lang == "cu" || lang == "cpp" || lang == "c++" ||
         lang == "cxx" || lang == "cc" || lang == "c" || lang == "cuh";
}

// Whether `body` defines kf_run: the word kf_run, optional white space, '(',
// a parameter list without ';', '{' or ')', ')', optional white space, '{'.
// Linear: the parameter list of every occurrence ends at the first ';', '{'
// or ')' after its '(', so one stop (and its verdict) serves all the
// occurrences before it, e.g. a reply of "kf_run(" repeated a million times.
bool DefinesKfRun(std::string_view body) {
  constexpr std::string_view kName = "kf_run";
  constexpr size_t npos = std::string_view::npos;
  size_t stop = 0;          // the first ';', '{' or ')' after the last '(' looked at
  bool stop_known = false;  // whether `stop` is computed
  for (size_t at = body.find(kName); at != npos; at = body.find(kName, at + 1)) {
    if (at > 0 && scan::IsWordChar(body[at - 1])) continue;
    size_t open = scan::SkipWhile(body, at + kName.size(), scan::IsSpace);
    if (open == body.size() || body[open] != '(') continue;
    if (!stop_known || stop < open) {
      stop = body.find_first_of(";{)", open + 1);
      stop_known = true;
      if (stop == npos) return false;  // no later occurrence can close its list either
      if (body[stop] == ')') {
        size_t brace = scan::SkipWhile(body, stop + 1, scan::IsSpace);
        if (brace < body.size() && body[brace] == '{') return true;
      }
    }
  }
  return false;
}

}  // namespace

Extraction ExtractKernel(std::string_view reply) {
  Extraction x;
  std::vector<Block> blocks = FindBlocks(reply);
  x.blocks_seen = static_cast<int>(blocks.size());
  std::vector<const Block*> defining;
  bool truncated_candidate = false;
  for (const Block& b : blocks) {
    if (!IsCodeLanguage(b.lang) || !DefinesKfRun(b.body)) continue;
    if (!b.closed) {
      truncated_candidate = true;
      continue;
    }
    defining.push_back(&b);
  }
  if (defining.empty()) {
    if (truncated_candidate) {
      x.problem =
          "Your reply was cut off inside the code block that defines kf_run (the closing ``` never "
          "came), so there is no complete kernel to compile; a shorter reply would fit.";
    } else if (blocks.empty()) {
      x.problem = "Your reply contains no fenced code block.";
    } else {
      x.problem =
          fmt::format("None of the {} code block(s) in your reply defines kf_run.", blocks.size());
    }
    return x;
  }
  for (const Block* b : defining) {
    if (b->body != defining.front()->body) {
      x.problem = fmt::format(
          "Your reply contains {} different code blocks that each define kf_run, so it is unclear "
          "which one to evaluate.",
          defining.size());
      return x;
    }
  }
  x.ok = true;
  x.source = defining.front()->body;
  return x;
}

}  // namespace kforge::agent
