// Aligned text tables for human output.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace edgecost::cli {

class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kRight;
  };

  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void AddRow(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  // A rule line before the next row, e.g. above totals.
  void AddRule() { rules_.push_back(rows_.size()); }
  void Print(std::ostream& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> rules_;
};

}  // namespace edgecost::cli
