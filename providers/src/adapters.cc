// The adapter table: one row per wire format.
#include "adapter.h"

namespace kforge::providers {

extern const Adapter kOpenAiChatAdapter;
extern const Adapter kOpenAiResponsesAdapter;
extern const Adapter kAnthropicAdapter;
extern const Adapter kGeminiAdapter;

const Adapter& AdapterFor(WireFormat wire) {
  static const Adapter* const kTable[] = {&kOpenAiChatAdapter, &kOpenAiResponsesAdapter,
                                          &kAnthropicAdapter, &kGeminiAdapter};
  for (const Adapter* a : kTable) {
    if (a->wire == wire) return *a;
  }
  return kOpenAiChatAdapter;
}

}  // namespace kforge::providers
