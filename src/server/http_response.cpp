// Response heads, transport error bodies and API-key checks.
#include <algorithm>
#include <cstdio>

#include "server/http_connection.h"

namespace deepinfer::server {

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string default_error_body(int status, std::string_view message) {
  std::string out = "{\"error\":{\"message\":";
  append_json_string(out, message);
  out += ",\"code\":";
  out += std::to_string(status);
  out += "}}";
  return out;
}

// Differences accumulate over the whole of both strings: no early exit on the first mismatch.
bool constant_time_equal(std::string_view a, std::string_view b) {
  size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

bool matches_any(std::string_view presented, const std::vector<std::string>& keys) {
  bool match = false;
  for (const std::string& key : keys) match |= constant_time_equal(presented, key);
  return match;
}

bool iequals_prefix(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower_prefix[i]) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 529: return "Overloaded";
    default: return "Unknown";
  }
}

void append_response_head(std::string& out, int status, std::string_view content_type, Framing framing,
                          size_t content_length, bool keep_alive, const Headers& extra) {
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += reason_phrase(status);
  out += "\r\n";
  if (!content_type.empty()) {
    out += "Content-Type: ";
    out += content_type;
    out += "\r\n";
  }
  // 1xx, 204 and 304 carry no body and, by RFC 9110, no Content-Length either.
  bool bodiless = status < 200 || status == 204 || status == 304;
  if (!bodiless && framing == Framing::kContentLength) {
    out += "Content-Length: ";
    out += std::to_string(content_length);
    out += "\r\n";
  } else if (!bodiless && framing == Framing::kChunked) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  out += "\r\n";
}

std::string error_body(const ServerContext& context, const HttpRequest& request, int status,
                       std::string_view message) {
  return context.config.error_body ? context.config.error_body(request, status, message)
                                   : default_error_body(status, message);
}

std::string error_response(const ServerContext& context, const HttpRequest& request, int status,
                           std::string_view message) {
  std::string body = error_body(context, request, status, message);
  std::string out;
  append_response_head(out, status, "application/json", Framing::kContentLength, body.size(), /*keep_alive=*/false, {});
  // A response to HEAD has no body (RFC 9110 9.3.2): a client would read it as the next response.
  if (request.method != "HEAD") out += body;
  return out;
}

bool authorized(const HttpRequest& request, const std::vector<std::string>& keys) {
  bool ok = false;
  if (const std::string* auth = request.header("authorization")) {
    std::string_view value = trim(*auth);
    if (iequals_prefix(value, "bearer ")) ok |= matches_any(trim(value.substr(7)), keys);
  }
  if (const std::string* key = request.header("x-api-key")) ok |= matches_any(trim(*key), keys);
  return ok;
}

}  // namespace deepinfer::server
