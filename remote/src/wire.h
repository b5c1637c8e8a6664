// Internal: the eval-server's wire format, shared by the server and the
// client (docs/scale.md has the table). Requests and answers are JSON; every
// refusal is a kforge.error/1 document with a code callers branch on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kforge/core/status.h"
#include "kforge/core/version.h"
#include "kforge/evaluator/service.h"

namespace kforge::remote::wire {

inline constexpr const char* kJobSchema = "kforge.eval_job/1";
inline constexpr const char* kInfoSchema = "kforge.eval_server/1";
inline constexpr const char* kErrorSchema = "kforge.error/1";
// Client and server must be the same kforge version: kforge::Version().

struct JobRequest {
  eval::EvalRequest job;
  std::string task_suite_hash;
  std::string kforge_version;
  std::string id;  // the client's name for the job, for logs; may be empty
};

nlohmann::json JobRequestJson(const JobRequest& request);
// Parses untrusted JSON text with bounded checks on every field: kInvalidInput
// naming the field that is missing or of the wrong type.
Result<JobRequest> ParseJobRequest(std::string_view body);

// {"schema":"kforge.error/1","error":{"code":...,"message":...}}
std::string ErrorBody(std::string_view code, std::string_view message);
// The code and message of an error body; empty strings when it is not one.
void ParseErrorBody(std::string_view body, std::string* code, std::string* message);

}  // namespace kforge::remote::wire
