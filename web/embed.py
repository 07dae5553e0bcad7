#!/usr/bin/env python3
"""Writes a C++ file that holds the web view's static files as byte arrays,
so the daemon serves them from its own binary: no files to install, no CDN.
Usage: embed.py OUT.cc FILE..."""
import os
import sys

TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".svg": "image/svg+xml",
}


def main():
    out_path, files = sys.argv[1], sys.argv[2:]
    lines = ['#include "web/assets.h"', "", "namespace edgecost::web {", "namespace {", ""]
    entries = []
    for i, path in enumerate(files):
        name = os.path.basename(path)
        ext = os.path.splitext(name)[1]
        if ext not in TYPES:
            sys.exit(f"embed.py: no media type for {name}")
        data = open(path, "rb").read()
        body = ",".join(str(b) for b in data)
        lines.append(f"constexpr unsigned char kFile{i}[] = {{{body}}};")
        entries.append(
            f'    {{"/assets/{name}", "{TYPES[ext]}", '
            f"std::string_view(reinterpret_cast<const char*>(kFile{i}), sizeof kFile{i})}},"
        )
    lines += ["", "}  // namespace", "", "const std::vector<Asset>& Assets() {",
              "  static const std::vector<Asset> assets = {"]
    lines += entries
    lines += ["  };", "  return assets;", "}", "", "}  // namespace edgecost::web", ""]
    with open(out_path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
