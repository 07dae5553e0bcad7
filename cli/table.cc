#include "cli/table.h"

#include <algorithm>
#include <iomanip>

namespace edgecost::cli {

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) width[c] = columns_[c].header.size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = c < cells.size() ? cells[c] : std::string();
      const bool last = c + 1 == columns_.size();
      if (columns_[c].align == Align::kLeft) {
        out << cell;
        if (!last) out << std::string(width[c] - cell.size(), ' ');
      } else {
        out << std::string(width[c] - cell.size(), ' ') << cell;
      }
      if (!last) out << "  ";
    }
    out << '\n';
  };
  auto print_rule = [&] {
    size_t total = 0;
    for (size_t w : width) total += w + 2;
    out << std::string(total > 2 ? total - 2 : 0, '-') << '\n';
  };
  std::vector<std::string> headers;
  for (const Column& column : columns_) headers.push_back(column.header);
  print_row(headers);
  print_rule();
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (std::find(rules_.begin(), rules_.end(), r) != rules_.end()) print_rule();
    print_row(rows_[r]);
  }
}

}  // namespace edgecost::cli
