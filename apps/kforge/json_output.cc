#include "json_output.h"

#include <cstdio>

#include "kforge/core/fs.h"

namespace kforge::cli {

void AddJsonOption(CLI::App* cmd, std::string& dest) {
  cmd->add_option(
      "--json", dest,
      "also write the result as JSON to FILE, or to stdout instead of the table with -");
}

Status WriteJson(const std::string& dest, const nlohmann::json& doc) {
  // Stored text (replies, prompts) may hold ill-formed UTF-8: replaced, not thrown.
  const std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (dest == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return Status::Ok();
  }
  return WritePublishedFile(dest, text).WithContext("--json " + dest);
}

}  // namespace kforge::cli
