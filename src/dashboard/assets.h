#pragma once

// The dashboard's page assets, embedded in bmas at build time (cmake/embed_assets.cmake): its
// own pages and scripts from web/src, and uPlot from npm (web/package-lock.json). Clusters are
// often offline, so nothing is fetched from a CDN.

#include <string_view>
#include <vector>

namespace bmas::dashboard {

struct Asset {
  std::string_view path;  // "/assets/app.js"; the pages are "/app.html" and "/login.html"
  std::string_view content_type;
  std::string_view body;
};

const std::vector<Asset>& Assets();

// The asset served at `path`, or nullptr.
inline const Asset* FindAsset(std::string_view path) {
  for (const Asset& a : Assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

}  // namespace bmas::dashboard
