// The web view's static files (web/*.css, *.js), built into the binary by
// web/embed.py: the daemon serves them at /assets/<name> without touching disk.
#pragma once

#include <string_view>
#include <vector>

namespace edgecost::web {

struct Asset {
  std::string_view path;  // "/assets/app.js"
  std::string_view content_type;
  std::string_view body;
};

const std::vector<Asset>& Assets();

// The asset at `path`, or null.
inline const Asset* FindAsset(std::string_view path) {
  for (const Asset& asset : Assets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

}  // namespace edgecost::web
