// The messages that share the ranks' memory: the harness's arenas
// (alloc, peers), how a candidate arena is shared (CUDA IPC or split for
// read-only inputs), and the candidate's attach, which maps them.
#include "kforge/abi_limits.h"
#include "protocol/messages.h"
#include "protocol/wire.h"

namespace kforge::eval::proto {
namespace {

using nlohmann::json;
using wire::WireReader;

constexpr size_t kMaxHandle = 256;  // hex digits of an IPC handle (64 bytes)

}  // namespace

json AllocRequest::ToJson() const {
  return {{"op", op::kAlloc},
          {"private_bytes", private_bytes},
          {"candidate_bytes", candidate_bytes},
          {"candidate_readonly_bytes", candidate_readonly_bytes}};
}

Result<AllocRequest> AllocRequest::Parse(const json& j) {
  WireReader r(j, "alloc");
  AllocRequest a;
  r.Size("private_bytes", &a.private_bytes, size_t{1} << 42);
  r.Size("candidate_bytes", &a.candidate_bytes, size_t{1} << 42);
  r.Size("candidate_readonly_bytes", &a.candidate_readonly_bytes, size_t{1} << 42);
  if (!r.ok()) return r.status();
  if (a.candidate_readonly_bytes > a.candidate_bytes) {
    return Error(ErrorKind::kHarness, "alloc: the read-only part exceeds the candidate arena");
  }
  return a;
}

json ArenaShare::ToJson() const {
  return {{"ipc_handle", ipc_handle}, {"bytes", bytes}, {"readonly_bytes", readonly_bytes}};
}

Result<ArenaShare> ArenaShare::Parse(const json& j, const std::string& what) {
  WireReader r(j, what);
  ArenaShare a;
  r.String("ipc_handle", &a.ipc_handle, kMaxHandle);
  r.Size("bytes", &a.bytes, size_t{1} << 42);
  r.Size("readonly_bytes", &a.readonly_bytes, size_t{1} << 42);
  if (!r.ok()) return r.status();
  if (a.split() ? (!a.ipc_handle.empty() || a.readonly_bytes >= a.bytes) : a.ipc_handle.empty()) {
    return Error(ErrorKind::kHarness,
                 what +
                     ": an arena is shared either by an IPC handle or split, with a read-only "
                     "part smaller than the whole");
  }
  return a;
}

json AllocReply::ToJson() const {
  return {{"private_handle", private_handle},
          {"private_bytes", private_bytes},
          {"candidate", candidate.ToJson()},
          {"readonly_refused", readonly_refused}};
}

Result<AllocReply> AllocReply::Parse(const json& j, const std::string& what) {
  WireReader r(j, what);
  AllocReply a;
  r.String("private_handle", &a.private_handle, kMaxHandle);
  r.Size("private_bytes", &a.private_bytes);
  r.String("readonly_refused", &a.readonly_refused);
  const json* c = r.Object("candidate");
  if (!r.ok()) return r.status();
  KF_ASSIGN_OR_RETURN(a.candidate, ArenaShare::Parse(*c, what + ": candidate"));
  return a;
}

json PeersRequest::ToJson() const {
  return {{"op", op::kPeers}, {"private_handles", private_handles}};
}

Result<PeersRequest> PeersRequest::Parse(const json& j) {
  WireReader r(j, "peers");
  PeersRequest p;
  r.Strings("private_handles", &p.private_handles, KF_MAX_RANKS);
  if (!r.ok()) return r.status();
  return p;
}

json AttachRequest::ToJson() const {
  json shares = json::array();
  for (const ArenaShare& a : arenas) shares.push_back(a.ToJson());
  return {{"op", op::kAttach}, {"arenas", shares}, {"nccl_id", nccl_id}};
}

Result<AttachRequest> AttachRequest::Parse(const json& j) {
  WireReader r(j, "attach");
  AttachRequest a;
  const json* shares = r.Array("arenas", KF_MAX_RANKS);
  r.String("nccl_id", &a.nccl_id, 512);
  if (!r.ok()) return r.status();
  for (size_t i = 0; i < shares->size(); ++i) {
    KF_ASSIGN_OR_RETURN(ArenaShare s,
                        ArenaShare::Parse((*shares)[i], "attach: arena " + std::to_string(i)));
    a.arenas.push_back(std::move(s));
  }
  return a;
}

size_t AttachRequest::Descriptors() const {
  size_t n = 0;
  for (const ArenaShare& a : arenas) n += a.split() ? 2 : 0;
  return n;
}

}  // namespace kforge::eval::proto
