// Internal to the agent: a stored turn as the agent's TurnRow (ports.h), its
// kernel read from the store's blobs. The one place the store's record is
// copied into the port's.
#pragma once

#include "kforge/agent/ports.h"
#include "kforge/results/store.h"

namespace kforge::agent {

inline Result<TurnRow> ReadTurnRow(const results::RunStore& store, const results::TurnRecord& r) {
  TurnRow t;
  t.id = r.id;
  t.session_id = r.session_id;
  t.index = r.index;
  t.prompt = r.prompt;
  t.reply = r.reply;
  t.feedback = r.feedback;
  if (!r.kernel_sha.empty()) {
    KF_ASSIGN_OR_RETURN(t.kernel, store.GetBlob(r.kernel_sha));
  }
  t.input_tokens = r.input_tokens;
  t.cached_input_tokens = r.cached_input_tokens;
  t.output_tokens = r.output_tokens;
  t.reasoning_tokens = r.reasoning_tokens;
  t.cost_usd = r.cost_usd;
  t.latency_s = r.latency_s;
  t.request_id = r.request_id;
  t.finish_reason = r.finish_reason;
  return t;
}

}  // namespace kforge::agent
