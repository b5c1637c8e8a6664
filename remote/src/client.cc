#include "kforge/remote/client.h"

#include <fmt/format.h>

#include <algorithm>

#include "http.h"
#include "wire.h"

namespace kforge::remote {

Result<ServerInfo> FetchServerInfo(const std::string& url, const std::string& token,
                                   double timeout_s) {
  HttpCall call;
  call.url = url + "/v1/info";
  call.token = token;
  call.total_timeout_s = timeout_s;
  call.connect_timeout_s = std::min(timeout_s, 10.0);
  call.max_response_bytes = 4 << 20;
  Result<HttpReply> reply = Send(call);
  if (!reply.ok())
    return Status(reply.status().kind(),
                  "evaluation server " + url + ": " + reply.status().message());
  std::string code, message;
  wire::ParseErrorBody(reply->body, &code, &message);
  if (reply->status == 401 || reply->status == 403) {
    return Error(ErrorKind::kAuth,
                 fmt::format("evaluation server {} refused the token: {}", url, message));
  }
  if (reply->status != 200) {
    return Error(reply->status >= 500 ? ErrorKind::kServerError : ErrorKind::kInvalidInput,
                 fmt::format("evaluation server {}: HTTP {} {}", url, reply->status,
                             message.empty() ? code : message));
  }
  nlohmann::json j = nlohmann::json::parse(reply->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("schema", "") != wire::kInfoSchema)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}/v1/info is not a {} document: is it a kforge eval-server?", url,
                             wire::kInfoSchema));
  ServerInfo info;
  try {
    info.url = url;
    info.kforge_version = j.value("kforge_version", "");
    info.task_suite_hash = j.value("task_suite_hash", "");
    info.host = j.value("host", "");
    info.world = j.value("world", 0);
    info.gpu_slots = j.at("capacity").value("gpu", 0);
    info.compile_slots = j.at("capacity").value("compile", 0);
    info.hardware = j.value("hardware", nlohmann::json());
  } catch (const nlohmann::json::exception& e) {
    return Error(ErrorKind::kInvalidInput, fmt::format("{}/v1/info: {}", url, e.what()));
  }
  info.raw = std::move(j);
  return info;
}

}  // namespace kforge::remote
