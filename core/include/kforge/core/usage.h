// What one model call used: the one token-and-cost record that the
// providers' answer, the agent's answer, a stored turn and the run store all
// carry (docs/providers.md, "Usage").
#pragma once

#include <cstdint>

namespace kforge {

// Token counts are normalised across providers: input_tokens includes cached
// (and cache-written) input; output_tokens includes reasoning tokens.
// cached_input_tokens and reasoning_tokens are parts of those, never added.
struct TokenUsage {
  int64_t input_tokens = 0, cached_input_tokens = 0, output_tokens = 0, reasoning_tokens = 0;
  double cost_usd = 0;
  // false: the registry has no price for the model, so cost_usd is 0 but not
  // free. Not stored with a turn: a turn read back says true.
  bool priced = true;

  // What budgets count: input and output (reasoning is part of output).
  int64_t tokens() const { return input_tokens + output_tokens; }
  bool operator==(const TokenUsage&) const = default;
};

}  // namespace kforge
