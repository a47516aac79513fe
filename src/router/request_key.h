// The routing key of an API request: the text that starts the prompt the replica will render,
// taken from the request body without rendering it (the router knows no chat template). Two
// requests whose rendered prompts share a prefix share a prefix of this key, because the
// templates render the model, tools and messages in order: the key is the model name, the
// tools, then each message's role and text, in the order given, with separators that no
// message text can fake into another message's boundary (0x1e, 0x1f).
//
// Only what decides the prompt goes in: sampling fields, "stream" and the like do not.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer::router {

struct RequestKey {
  std::string text;     // empty when the body is not JSON the router understands
  bool stream = false;  // "stream": true
};

// `path` picks the protocol: /v1/chat/completions, /v1/completions, /v1/messages,
// /v1/responses. A body that does not parse gets an empty key: the replica answers it with the
// protocol's own 400, and the router does not duplicate that validation.
RequestKey request_key(std::string_view path, std::string_view body);

}  // namespace deepinfer::router
