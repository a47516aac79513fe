#include "server/http_policy.h"

#include <arpa/inet.h>

#include <algorithm>

namespace deepinfer::server {

namespace {

// Header values quoted back in messages are cut: a refusal costs no more than the head did.
constexpr size_t kQuoteMax = 100;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view s) {
  std::string out(1, '\'');
  out.append(s.substr(0, kQuoteMax));
  out += s.size() > kQuoteMax ? "...'" : "'";
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// RFC 9110 section 5.6.2.
bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_ipv4(const std::string& s) {
  in_addr a{};
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}

bool is_ipv6(const std::string& s) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

// A host name compared as DNS does: case-insensitive, a final dot (the root) ignored.
std::string normal_name(std::string_view name) {
  std::string out = lower(name);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

struct Authority {
  std::string name;  // normal_name of the host, or the IPv6 literal without brackets
  bool ip = false;   // an IP literal: no DNS name an attacker could rebind
};

// `host [":" port]` as the Host header carries it (RFC 9110 section 7.2); nullopt when malformed.
std::optional<Authority> parse_authority(std::string_view value) {
  std::string_view port;
  Authority out;
  if (!value.empty() && value.front() == '[') {
    size_t close = value.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    out.name = lower(value.substr(1, close - 1));
    std::string_view rest = value.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !all_digits(rest.substr(1)))) return std::nullopt;
    if (!is_ipv6(out.name)) return std::nullopt;
    out.ip = true;
    return out;
  }
  size_t colon = value.find(':');
  if (colon != std::string_view::npos) {
    port = value.substr(colon + 1);
    if (!all_digits(port)) return std::nullopt;
    value = value.substr(0, colon);
  }
  if (value.empty()) return std::nullopt;
  out.name = normal_name(value);
  out.ip = is_ipv4(out.name);
  return out;
}

bool host_check_active(const HttpServerConfig& config) {
  const auto& hosts = config.allowed_hosts;
  if (std::find(hosts.begin(), hosts.end(), "*") != hosts.end()) return false;
  return is_loopback_host(config.host) || !hosts.empty();
}

bool iequals(std::string_view a, std::string_view b) { return lower(a) == lower(b); }

// The parameters of a media type after its "type/subtype" (RFC 9110 section 5.6.6):
// *( OWS ";" OWS [ token "=" ( token / quoted-string ) ] ). Calls `on_parameter` with the
// lower-case name and the unquoted value; false when the text does not parse.
template <typename OnParameter>
bool parse_parameters(std::string_view s, OnParameter on_parameter) {
  size_t i = 0;
  auto skip_ows = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  auto token = [&] {
    size_t start = i;
    while (i < s.size() && is_tchar(s[i])) ++i;
    return s.substr(start, i - start);
  };
  while (true) {
    skip_ows();
    if (i == s.size()) return true;
    if (s[i] != ';') return false;
    ++i;
    skip_ows();
    if (i == s.size() || s[i] == ';') continue;
    std::string name = lower(token());
    if (name.empty() || i == s.size() || s[i] != '=') return false;
    ++i;
    std::string value;
    if (i < s.size() && s[i] == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) ++i;
        value += s[i];
      }
      if (i == s.size()) return false;  // unterminated
      ++i;
    } else {
      value = std::string(token());
      if (value.empty()) return false;
    }
    on_parameter(name, value);
  }
}

}  // namespace

std::optional<Refusal> check_framing(const HttpRequest& head) {
  std::vector<const std::string*> lengths, codings;
  for (const auto& [name, value] : head.headers) {
    if (name == "content-length") lengths.push_back(&value);
    if (name == "transfer-encoding") codings.push_back(&value);
  }
  if (!codings.empty()) {
    if (head.version < 11) {
      return Refusal{400, "Transfer-Encoding does not exist in HTTP/1.0: send the body with Content-Length"};
    }
    if (!lengths.empty()) return Refusal{400, "a request must not carry both Transfer-Encoding and Content-Length"};
    if (codings.size() > 1 || !iequals(trim(*codings[0]), "chunked")) {
      std::string sent = codings.size() > 1 ? "several Transfer-Encoding headers" : quoted(*codings[0]);
      return Refusal{400, "Transfer-Encoding " + sent +
                              " is not supported: the only transfer coding accepted is chunked, alone"};
    }
  }
  if (lengths.size() > 1) return Refusal{400, "a request must carry at most one Content-Length"};
  if (lengths.size() == 1) {
    std::string_view value = trim(*lengths[0]);
    // 19 digits stay below 2^63: a longer number is no body this server would take anyway.
    if (!all_digits(value) || value.size() > 19) {
      return Refusal{400, "Content-Length " + quoted(value) + " is not a decimal number of bytes"};
    }
  }
  return std::nullopt;
}

bool is_loopback_host(std::string_view bind_host) {
  std::string host = normal_name(bind_host);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

std::optional<Refusal> check_host(const HttpRequest& head, const HttpServerConfig& config) {
  const std::string* host = nullptr;
  int n_host = 0;
  for (const auto& [name, value] : head.headers) {
    if (name == "host") {
      host = &value;
      ++n_host;
    }
  }
  if (n_host > 1) return Refusal{400, "a request must carry one Host header, not several"};
  if (n_host == 0) {
    if (head.version >= 11) return Refusal{400, "an HTTP/1.1 request must carry a Host header"};
    return std::nullopt;  // HTTP/1.0 may omit it; browsers, the DNS-rebinding risk, never do
  }
  if (!host_check_active(config)) return std::nullopt;
  std::optional<Authority> authority = parse_authority(trim(*host));
  if (!authority) return Refusal{400, "the Host header " + quoted(*host) + " is not a host name with an optional port"};
  if (authority->ip || authority->name == "localhost") return std::nullopt;
  for (const std::string& allowed : config.allowed_hosts) {
    if (normal_name(allowed) == authority->name) return std::nullopt;
  }
  return Refusal{403, "the Host " + quoted(authority->name) +
                          " is not allowed: a server on a loopback address answers localhost and IP addresses only "
                          "(DNS-rebinding protection); start it with --allowed-hosts " +
                          authority->name.substr(0, kQuoteMax) + " to accept this name"};
}

OriginCheck check_origin(const HttpRequest& head, const std::vector<std::string>& allowed_origins) {
  OriginCheck out;
  const bool any = std::find(allowed_origins.begin(), allowed_origins.end(), "*") != allowed_origins.end();
  // The answer depends on Origin whenever it is echoed: caches must keep one copy per origin.
  if (!allowed_origins.empty() && !any) out.response_headers.push_back({"Vary", "Origin"});
  const std::string* origin = head.header("origin");
  if (origin == nullptr) return out;
  const std::string asked = lower(trim(*origin));
  bool listed = any;
  for (const std::string& allowed : allowed_origins) {
    std::string_view a = allowed;
    while (!a.empty() && a.back() == '/') a.remove_suffix(1);
    listed = listed || lower(a) == asked;
  }
  if (listed) {
    out.verdict = OriginVerdict::kAllowed;
    out.response_headers.push_back({"Access-Control-Allow-Origin", any ? "*" : std::string(trim(*origin))});
    return out;
  }
  const std::string* host = head.header("host");
  if (host != nullptr && asked == "http://" + lower(trim(*host))) {
    out.verdict = OriginVerdict::kSameOrigin;
    return out;
  }
  out.verdict = OriginVerdict::kRefused;
  return out;
}

bool is_preflight(const HttpRequest& head) {
  return head.method == "OPTIONS" && head.header("origin") != nullptr &&
         head.header("access-control-request-method") != nullptr;
}

std::optional<Refusal> check_json_content_type(std::string_view value) {
  const std::string expected = "Content-Type must be application/json (optionally with charset=utf-8), not ";
  size_t semicolon = value.find(';');
  std::string media = lower(trim(value.substr(0, semicolon)));
  if (media != "application/json") return Refusal{415, expected + quoted(value)};
  std::string charset;
  bool parsed = semicolon == std::string_view::npos ||
                parse_parameters(value.substr(semicolon), [&](const std::string& name, const std::string& v) {
                  if (name == "charset") charset = lower(v);
                });
  if (!parsed) return Refusal{415, "Content-Type " + quoted(value) + " does not parse as a media type with parameters"};
  if (!charset.empty() && charset != "utf-8") {
    return Refusal{415, "Content-Type charset " + quoted(charset) + " is not supported: JSON bodies are UTF-8"};
  }
  return std::nullopt;
}

}  // namespace deepinfer::server
