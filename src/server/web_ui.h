// The web UI at /ui: the files under web/ (embedded at build time by cmake/embed_web.cmake), a
// dashboard (/ui), the recipe visualiser (/ui/recipe) and a chat playground (/ui/chat), with
// their scripts and styles under /ui/static/. They call the API of the same origin only, so they
// work with the transport's Host and Origin checks at their defaults (docs/security.md). The
// pages load without an API key (the key is asked for in the page and sent with each API call);
// every answer carries a Content-Security-Policy that lets a page load and fetch nothing from any
// other origin, and an ETag (a revalidated page is a 304).
// Immutable data and pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http.h"

namespace deepinfer::server {

struct WebAsset {
  std::string_view path;  // relative to web/: "index.html", "static/chat.js"
  std::string_view body;
};

// Every file of web/, sorted by path (generated: web_assets.cpp in the build directory).
const std::vector<WebAsset>& web_assets();

// The URL path an asset is served at: a page "NAME.html" at /ui/NAME (index.html at /ui), any
// other file at /ui/ + its path.
std::string web_url_path(std::string_view asset_path);

// By the file's extension; application/octet-stream for an unknown one.
std::string_view web_content_type(std::string_view asset_path);

// GET routes for every asset (HEAD follows GET in the transport).
std::vector<Route> web_ui_routes();

// The paths of those routes, which need no API key (HttpServerConfig::public_paths).
std::vector<std::string> web_ui_paths();

}  // namespace deepinfer::server
