// Text placed in HTML or SVG: names come from graph files and clients.
#pragma once

#include <string>
#include <string_view>

namespace edgecost {

// Escapes & < > " ' and replaces control characters (invalid in XML) with spaces.
std::string HtmlEscape(std::string_view text);

}  // namespace edgecost
