// The embedded web UI: every file of web/ is compiled in and routed, with its content type.
#include "server/web_ui.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace deepinfer::server {
namespace {

TEST(WebUi, PagesAndFilesHaveTheirPaths) {
  EXPECT_EQ(web_url_path("index.html"), "/ui");
  EXPECT_EQ(web_url_path("recipe.html"), "/ui/recipe");
  EXPECT_EQ(web_url_path("static/chat.js"), "/ui/static/chat.js");
  EXPECT_EQ(web_content_type("static/chat.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(web_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(web_content_type("static/style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(web_content_type("notes.xyz"), "application/octet-stream");
}

TEST(WebUi, EveryAssetIsEmbeddedAndRouted) {
  const auto& assets = web_assets();
  for (const char* name : {"index.html", "recipe.html", "chat.html", "static/common.js", "static/style.css"}) {
    auto it = std::find_if(assets.begin(), assets.end(), [&](const WebAsset& a) { return a.path == name; });
    ASSERT_NE(it, assets.end()) << name;
    EXPECT_FALSE(it->body.empty()) << name;
  }
  const std::vector<std::string> paths = web_ui_paths();
  const std::vector<Route> routes = web_ui_routes();
  ASSERT_EQ(paths.size(), routes.size());
  EXPECT_EQ(paths.size(), assets.size() + 1);  // the dashboard at /ui and /ui/
  for (size_t i = 0; i < routes.size(); ++i) {
    EXPECT_EQ(routes[i].method, "GET");
    EXPECT_EQ(routes[i].path, paths[i]);
  }
}

}  // namespace
}  // namespace deepinfer::server
