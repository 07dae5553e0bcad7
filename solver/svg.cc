#include "solver/svg.h"

#include <algorithm>
#include <sstream>

#include "solver/plan.h"

namespace edgecost::solver {
namespace {

struct Style {
  const char* label;
  const char* color;
};

// Drawn in this order of precedence when several apply to one cell.
constexpr Style kCompute{"compute (first time)", "#1f77b4"};
constexpr Style kRecompute{"recompute", "#d62728"};
constexpr Style kPageIn{"page-in", "#2ca02c"};
constexpr Style kPageOut{"page-out", "#ff7f0e"};
constexpr Style kResident{"resident in RAM", "#aec7e8"};
constexpr Style kStored{"on storage", "#c5b0d5"};

}  // namespace

std::string ScheduleToSvg(const Problem& p, const v1::Schedule& schedule) {
  const int n = p.size();
  const Plan plan = PlanFromStages(schedule, n);
  const int cell = std::max(2, std::min(10, 1200 / std::max(1, n)));
  const int left = 70, top = 60, legend_w = 190;
  const int width = left + n * cell + legend_w + 20, height = top + n * cell + 50;
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left
      << "\" y=\"20\" font-size=\"14\">"
      // "optimal" only with a proof: a solve stopped by its time limit drew a feasible schedule
      << (schedule.status() == v1::Schedule::STATUS_OPTIMAL ? "optimal" : "feasible") << " schedule (strategy "
      << schedule.strategy() << "): " << schedule.energy().total_j() << " J, peak " << schedule.peak_ram_bytes()
      << " B of " << schedule.ram_budget_bytes() << " B</text>\n"
      << "<text x=\"" << left + n * cell / 2 << "\" y=\"" << top - 10
      << "\" text-anchor=\"middle\">node (topological order) &#8594;</text>\n"
      << "<text x=\"20\" y=\"" << top + n * cell / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
      << top + n * cell / 2 << ")\">stage &#8594;</text>\n"
      << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << n * cell << "\" height=\"" << n * cell
      << "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < n; ++i) {
      const Style* style = nullptr;
      if (plan.compute[t][i]) {
        style = i == t ? &kCompute : &kRecompute;
      } else if (plan.page_in[t][i]) {
        style = &kPageIn;
      } else if (plan.page_out[t][i]) {
        style = &kPageOut;
      } else if (plan.resident[t][i]) {
        style = &kResident;
      } else if (plan.stored[t][i]) {
        style = &kStored;
      }
      if (!style) continue;
      out << "<rect x=\"" << left + i * cell << "\" y=\"" << top + t * cell << "\" width=\"" << cell << "\" height=\""
          << cell << "\" fill=\"" << style->color << "\"/>\n";
    }
  }
  // Axis ticks every tenth node.
  const int step = std::max(1, n / 10);
  for (int i = 0; i < n; i += step) {
    out << "<text x=\"" << left + i * cell << "\" y=\"" << top + n * cell + 15 << "\" font-size=\"10\">" << i
        << "</text>\n<text x=\"" << left - 5 << "\" y=\"" << top + i * cell + cell << "\" font-size=\"10\" "
        << "text-anchor=\"end\">" << i << "</text>\n";
  }
  int y = top;
  for (const Style* style : {&kCompute, &kRecompute, &kResident, &kStored, &kPageIn, &kPageOut}) {
    const int x = left + n * cell + 20;
    out << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"12\" height=\"12\" fill=\"" << style->color
        << "\"/><text x=\"" << x + 18 << "\" y=\"" << y + 11 << "\">" << style->label << "</text>\n";
    y += 20;
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace edgecost::solver
