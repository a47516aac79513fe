#include "server/web_ui.h"

#include <cstdint>
#include <cstdio>

namespace deepinfer::server {

namespace {

// 'self' only: a page may load its own scripts and styles and call its own server, nothing
// else. No inline script or style at all, so an injected <script> in shown text cannot run
// even if escaping failed somewhere; frame-ancestors keeps other sites from framing the pages.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// FNV-1a over the bytes: the ETag only has to change when the file does.
std::string etag_of(std::string_view body) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : body) hash = (hash ^ c) * 1099511628211ull;
  char text[24];
  std::snprintf(text, sizeof(text), "\"%016llx\"", static_cast<unsigned long long>(hash));
  return text;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

}  // namespace

std::string web_url_path(std::string_view asset_path) {
  if (asset_path == "index.html") return "/ui";
  std::string path = "/ui/";
  if (ends_with(asset_path, ".html") && asset_path.find('/') == std::string_view::npos) {
    path += asset_path.substr(0, asset_path.size() - 5);
  } else {
    path += asset_path;
  }
  return path;
}

std::string_view web_content_type(std::string_view asset_path) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
      {".json", "application/json"},         {".png", "image/png"},
  };
  for (const auto& [extension, type] : kTypes) {
    if (ends_with(asset_path, extension)) return type;
  }
  return "application/octet-stream";
}

namespace {

// The dashboard answers at /ui/ too, where a typed address often ends.
std::vector<std::string> url_paths(std::string_view asset_path) {
  if (asset_path == "index.html") return {"/ui", "/ui/"};
  return {web_url_path(asset_path)};
}

}  // namespace

std::vector<Route> web_ui_routes() {
  std::vector<Route> routes;
  for (const WebAsset& asset : web_assets()) {
    Headers headers = {
        {"Content-Security-Policy", std::string(kContentSecurityPolicy)},
        {"X-Content-Type-Options", "nosniff"},
        {"Referrer-Policy", "no-referrer"},
        // Revalidated on every load (a 304 when unchanged): a rebuilt binary's pages show at once.
        {"Cache-Control", "no-cache"},
        {"ETag", etag_of(asset.body)},
    };
    const std::string_view type = web_content_type(asset.path);
    Handler handler = [asset, type, headers](const HttpRequest& request, ResponseWriter& out) {
      const std::string* match = request.header("if-none-match");
      if (match != nullptr && *match == headers.back().second) {
        out.send(304, type, "", headers);
        return;
      }
      out.send(200, type, std::string(asset.body), headers);
    };
    for (std::string& path : url_paths(asset.path)) routes.push_back({"GET", std::move(path), handler});
  }
  return routes;
}

std::vector<std::string> web_ui_paths() {
  std::vector<std::string> paths;
  for (const WebAsset& asset : web_assets()) {
    for (std::string& path : url_paths(asset.path)) paths.push_back(std::move(path));
  }
  return paths;
}

}  // namespace deepinfer::server
