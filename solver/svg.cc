#include "solver/svg.h"

#include <algorithm>
#include <cstdio>

#include "base/markup.h"
#include "base/units.h"
#include "solver/plan.h"
#include "solver/timeline.h"

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

constexpr const char* kStageMeaning =
    "A stage is one slice of the training step: stage t computes node t for the first time, and may first "
    "recompute earlier nodes or page their outputs in or out.";  // as service::kStageMeaning says it

std::string Num(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", x);
  return buffer;
}

}  // namespace

std::string Headline(const v1::Schedule& schedule) {
  // "optimal" only with a proof: a solve stopped by its time limit drew the best schedule it had found.
  std::string what;
  if (schedule.strategy() != "optimal" && !schedule.strategy().empty()) {
    what = schedule.strategy() + " schedule";
  } else if (schedule.status() == v1::Schedule::STATUS_OPTIMAL) {
    what = "Optimal schedule (proven)";
  } else {
    what = "Best schedule found in the time limit (not proven optimal)";
  }
  return what + ": " + FormatJoules(schedule.energy().total_j()) +
         (schedule.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " ESTIMATED" : "") + ", peak " +
         FormatBytes(static_cast<double>(schedule.peak_ram_bytes())) + " of " +
         FormatBytes(static_cast<double>(schedule.activation_budget_bytes())) + " RAM";
}

Markup ScheduleToSvg(const Problem& p, const v1::Schedule& schedule) {
  const int n = p.size();
  const Plan plan = PlanFromStages(schedule, n);
  const Result<Timeline> timeline = PredictTimeline(p, schedule);
  const int cell = std::max(2, std::min(24, 720 / std::max(1, n)));
  const int grid = n * cell;
  const int left = 70, top = 70, legend_w = 200;
  const int names_h = 110;  // layer names under the grid, slanted
  const int curve_top = top + grid + names_h, curve_h = 150, curve_w = std::max(grid, 360);
  // Wide enough for the headline (14 px type, about 8 px a character): a page scales the picture, never crops it.
  const std::string headline = Headline(schedule);
  const int width = std::max(left + std::max(grid, curve_w) + legend_w + 20,
                             left + 8 * static_cast<int>(headline.size()) + 20);
  const int height = curve_top + curve_h + 50;
  HtmlWriter out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-labelledby=\"schedule-title\">\n"
      << "<title id=\"schedule-title\">" << schedule.strategy() << " schedule of " << n
      << " nodes: stages down, nodes across; RAM in use over time below</title>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text class=\"headline\" x=\"" << left << "\" y=\"20\" font-size=\"14\">" << headline << "</text>\n"
      << "<text x=\"" << left << "\" y=\"" << top - 28 << "\">node (topological order) &#8594;</text>\n"
      << "<text x=\"20\" y=\"" << top + grid / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
      << top + grid / 2 << ")\">stage &#8594;<title>" << kStageMeaning << "</title></text>\n"
      << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << grid << "\" height=\"" << grid
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
      out << "<rect class=\"cell\" x=\"" << left + i * cell << "\" y=\"" << top + t * cell << "\" width=\"" << cell
          << "\" height=\"" << cell << "\" fill=\"" << style->color << "\"/>\n";
    }
  }
  // Stage numbers down the side, layer names under the grid (at most about 40 of each).
  const int step = std::max(1, (n + 39) / 40);
  for (int i = 0; i < n; i += step) {
    const int x = left + i * cell + cell / 2, y = top + grid + 6;
    out << "<text x=\"" << left - 5 << "\" y=\"" << top + i * cell + cell << "\" font-size=\"10\" "
        << "text-anchor=\"end\">" << i << "</text>\n"
        << "<text class=\"layer\" x=\"" << x << "\" y=\"" << y << "\" font-size=\"10\" text-anchor=\"end\" "
        << "transform=\"rotate(-60 " << x << " " << y << ")\">" << p.names[static_cast<size_t>(i)].substr(0, 18)
        << "</text>\n";
  }
  int y = top;
  const int legend_x = left + std::max(grid, curve_w) + 20;
  for (const Style* style : {&kCompute, &kRecompute, &kResident, &kStored, &kPageIn, &kPageOut}) {
    out << "<rect x=\"" << legend_x << "\" y=\"" << y << "\" width=\"12\" height=\"12\" fill=\"" << style->color
        << "\"/><text x=\"" << legend_x + 18 << "\" y=\"" << y + 11 << "\">" << style->label << "</text>\n";
    y += 20;
  }
  if (!timeline.ok()) {
    out << "<text x=\"" << left << "\" y=\"" << curve_top + 20 << "\">no RAM curve: " << timeline.status().message()
        << "</text>\n</svg>\n";
    return out.str();
  }
  const Timeline& tl = *timeline;
  // The forward/backward boundary on the grid: the first backward node's column and stage.
  if (tl.first_backward_node >= 0) {
    const int b = tl.first_backward_node;
    out << "<g class=\"boundary\" stroke=\"#333\" stroke-dasharray=\"4 3\">"
        << "<line x1=\"" << left + b * cell << "\" y1=\"" << top << "\" x2=\"" << left + b * cell << "\" y2=\""
        << top + grid << "\"/><line x1=\"" << left << "\" y1=\"" << top + b * cell << "\" x2=\"" << left + grid
        << "\" y2=\"" << top + b * cell << "\"/></g>\n"
        << "<text x=\"" << left + b * cell + 3 << "\" y=\"" << top - 6
        << "\" font-size=\"10\">backward &#8594;</text>\n";
  }
  // RAM over time: a step curve of the memory in use, the budget, and the boundary.
  const double max_bytes =
      std::max<double>({1.0, static_cast<double>(tl.budget_bytes), static_cast<double>(tl.peak_bytes)}) * 1.1;
  const double end_s = tl.runtime_s > 0 ? tl.runtime_s : 1;
  auto X = [&](double s) { return left + curve_w * s / end_s; };
  auto Y = [&](double bytes) { return curve_top + curve_h - curve_h * bytes / max_bytes; };
  out << "<g class=\"ram-curve\">\n<text x=\"" << left << "\" y=\"" << curve_top - 6
      << "\">RAM in use over the predicted step (time &#8594;)</text>\n"
      << "<rect x=\"" << left << "\" y=\"" << curve_top << "\" width=\"" << curve_w << "\" height=\"" << curve_h
      << "\" fill=\"#fafafa\" stroke=\"#999\"/>\n<polyline class=\"ram\" fill=\"none\" stroke=\"#1f77b4\" "
         "stroke-width=\"1.5\" points=\"";
  double prev_bytes = 0;
  out << Num(X(0)) << "," << Num(Y(0));
  for (const MemorySample& sample : tl.memory) {
    out << " " << Num(X(sample.time_s)) << "," << Num(Y(prev_bytes)) << " " << Num(X(sample.time_s)) << ","
        << Num(Y(static_cast<double>(sample.bytes)));
    prev_bytes = static_cast<double>(sample.bytes);
  }
  out << "\"/>\n<line class=\"budget\" x1=\"" << left << "\" y1=\"" << Num(Y(static_cast<double>(tl.budget_bytes)))
      << "\" x2=\"" << left + curve_w << "\" y2=\"" << Num(Y(static_cast<double>(tl.budget_bytes)))
      << "\" stroke=\"#d62728\" stroke-dasharray=\"6 3\"/>\n"
      << "<text x=\"" << left + curve_w + 4 << "\" y=\"" << Num(Y(static_cast<double>(tl.budget_bytes)) + 4)
      << "\" font-size=\"10\" fill=\"#d62728\">budget " << FormatBytes(static_cast<double>(tl.budget_bytes)) << "</text>\n"
      << "<text x=\"" << left - 5 << "\" y=\"" << curve_top + 10 << "\" font-size=\"10\" text-anchor=\"end\">"
      << FormatBytes(max_bytes) << "</text><text x=\"" << left - 5 << "\" y=\"" << curve_top + curve_h
      << "\" font-size=\"10\" text-anchor=\"end\">0</text>\n"
      << "<text x=\"" << left + curve_w << "\" y=\"" << curve_top + curve_h + 14
      << "\" font-size=\"10\" text-anchor=\"end\">" << FormatSeconds(tl.runtime_s) << "</text>\n";
  if (tl.backward_start_s >= 0) {
    out << "<line class=\"boundary\" x1=\"" << Num(X(tl.backward_start_s)) << "\" y1=\"" << curve_top << "\" x2=\""
        << Num(X(tl.backward_start_s)) << "\" y2=\"" << curve_top + curve_h
        << "\" stroke=\"#333\" stroke-dasharray=\"4 3\"/>\n<text x=\"" << Num(X(tl.backward_start_s) + 3) << "\" y=\""
        << curve_top + 12 << "\" font-size=\"10\">backward &#8594;</text>\n"
        << "<text x=\"" << Num(X(tl.backward_start_s) - 3) << "\" y=\"" << curve_top + 12
        << "\" font-size=\"10\" text-anchor=\"end\">&#8592; forward</text>\n";
  }
  out << "</g>\n</svg>\n";
  return out.str();
}

}  // namespace edgecost::solver
