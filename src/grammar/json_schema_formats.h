// The string formats JSON Schema names, as regexes over the decoded string (anchored, whole
// text). Each is at least as strict as the RFC it names (RFC 3339 date/time without leap
// seconds or lowercase t/z, RFC 4122 UUIDs, dotted-quad IPv4 without leading zeros, IPv6
// without zone or embedded IPv4, RFC 3986 URIs of printable ASCII): a looser regex would accept
// strings a validator refuses.
#pragma once

#include <optional>
#include <string>

namespace deepinfer::grammar {

std::optional<std::string> format_regex(const std::string& format);

}  // namespace deepinfer::grammar
