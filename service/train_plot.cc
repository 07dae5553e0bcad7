#include "service/train_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/markup.h"
#include "base/units.h"

namespace edgecost::service {
namespace {

// Narrow, with large type: a phone shows the picture at about 360 px, where 14 user units are still
// 11 px; a desktop draws it at kDrawnWidth.
constexpr double kWidth = 440;
constexpr double kDrawnWidth = 620;
constexpr double kLeft = 74;   // room for the value labels
constexpr double kRight = 12;
constexpr double kPanelHeight = 150;
constexpr double kTitleHeight = 48;
constexpr double kGap = 50;    // the step axis of the upper panel and the title of the lower
constexpr int kTitleFont = 16;
constexpr int kFont = 14;      // every other label
// A step more than this many times the 90th percentile of the steps is an outlier (a page fault, a
// descheduled thread): marked at the panel's top edge, not allowed to set the axis.
constexpr double kOutlierFactor = 2.0;

std::string Num(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", x);
  return buffer;
}

std::string Loss(double loss) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", loss);
  return buffer;
}

struct Panel {
  std::string title;                         // with its unit
  std::vector<double> values;                // one per step
  std::function<std::string(double)> label;  // a value with its unit
  double reference = NAN;                    // a dashed line, e.g. the prediction
  std::string reference_label;
  const char* color;
  bool clip_outliers = false;  // the axis from the bulk of the values; those far above it marked
};

// The top of the axis: the largest value, or with clip_outliers the largest that is no outlier.
double AxisHigh(const Panel& panel) {
  double high = *std::max_element(panel.values.begin(), panel.values.end());
  if (!panel.clip_outliers || panel.values.size() < 3) return high;
  std::vector<double> sorted = panel.values;
  std::sort(sorted.begin(), sorted.end());
  const double p90 = sorted[static_cast<size_t>(0.9 * static_cast<double>(sorted.size() - 1))];
  if (!(p90 > 0) || high <= kOutlierFactor * p90) return high;
  high = p90;
  for (double v : sorted) {
    if (v <= kOutlierFactor * p90) high = v;
  }
  return high;
}

// A run of many steps is drawn by at most this many of them, evenly spaced, the last included: a
// 100,000-step run's page stays kilobytes.
constexpr size_t kMaxPlottedSteps = 500;

// One panel at `top`: a frame, min and max labels, the steps (1-based numbers in `steps`) as a line
// with a dot each.
void DrawPanel(HtmlWriter& out, const Panel& panel, double top, const std::vector<uint32_t>& steps,
               const std::vector<bool>& disturbed) {
  const double width = kWidth - kLeft - kRight;
  double low = *std::min_element(panel.values.begin(), panel.values.end());
  double high = AxisHigh(panel);
  const double bulk_high = high;  // values above it are outliers, drawn at the top edge
  if (std::isfinite(panel.reference)) {
    low = std::min(low, panel.reference);
    high = std::max(high, panel.reference);
  }
  if (!(high > low)) {  // a flat line sits in the middle
    const double pad = std::max(std::abs(high) * 0.05, 1e-12);
    low -= pad;
    high += pad;
  }
  const size_t n = panel.values.size();
  const double last = steps.back() > 1 ? static_cast<double>(steps.back() - 1) : 1.0;
  auto x = [&](size_t i) { return kLeft + (n > 1 ? width * static_cast<double>(steps[i] - 1) / last : width / 2); };
  auto y = [&](double v) { return top + kPanelHeight - kPanelHeight * (std::min(v, high) - low) / (high - low); };
  out << "<text x=\"" << Num(kLeft) << "\" y=\"" << Num(top - 8) << "\" font-size=\"" << kFont
      << "\" font-weight=\"bold\">" << panel.title << "</text>";
  out << "<rect x=\"" << Num(kLeft) << "\" y=\"" << Num(top) << "\" width=\"" << Num(width) << "\" height=\""
      << Num(kPanelHeight) << "\" fill=\"none\" stroke=\"#d0d7de\"/>";
  out << "<text class=\"axis-high\" x=\"" << Num(kLeft - 6) << "\" y=\"" << Num(top + 12) << "\" font-size=\""
      << kFont << "\" text-anchor=\"end\">" << panel.label(high) << "</text>";
  out << "<text x=\"" << Num(kLeft - 6) << "\" y=\"" << Num(top + kPanelHeight) << "\" font-size=\"" << kFont
      << "\" text-anchor=\"end\">" << panel.label(low) << "</text>";
  if (std::isfinite(panel.reference)) {
    out << "<line x1=\"" << Num(kLeft) << "\" x2=\"" << Num(kLeft + width) << "\" y1=\"" << Num(y(panel.reference))
        << "\" y2=\"" << Num(y(panel.reference)) << "\" stroke=\"#57606a\" stroke-dasharray=\"5 4\"><title>"
        << panel.reference_label << "</title></line>";
  }
  out << "<polyline fill=\"none\" stroke=\"" << panel.color << "\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < n; ++i) out << (i ? " " : "") << Num(x(i)) << "," << Num(y(panel.values[i]));
  out << "\"/>";
  size_t outliers = 0;
  double largest = bulk_high;
  for (size_t i = 0; i < n; ++i) {
    const bool hollow = i < disturbed.size() && disturbed[i];
    const std::string tooltip = "<title>step " + std::to_string(steps[i]) + ": " + panel.label(panel.values[i]) +
                                (hollow ? " (disturbed)" : "") + "</title>";
    const std::string fill = hollow ? "#ffffff" : panel.color;
    if (panel.values[i] > bulk_high) {  // an outlier: a triangle pointing up at the top edge
      ++outliers;
      largest = std::max(largest, panel.values[i]);
      const double cx = x(i), cy = top;
      out << "<path class=\"outlier\" d=\"M" << Num(cx) << " " << Num(cy - 1) << "L" << Num(cx - 6) << " "
          << Num(cy + 9) << "H" << Num(cx + 6) << "Z\" fill=\"" << fill << "\" stroke=\"" << panel.color << "\">"
          << tooltip << "</path>";
      continue;
    }
    out << "<circle cx=\"" << Num(x(i)) << "\" cy=\"" << Num(y(panel.values[i])) << "\" r=\"3\" fill=\"" << fill
        << "\" stroke=\"" << panel.color << "\">" << tooltip << "</circle>";
  }
  if (outliers > 0) {
    out << "<text class=\"outlier-note\" x=\"" << Num(kLeft + width - 4) << "\" y=\"" << Num(top + 28)
        << "\" font-size=\"" << kFont << "\" text-anchor=\"end\" fill=\"#57606a\">" << outliers
        << (outliers == 1 ? " step" : " steps") << " off the axis (\u25B2), up to " << panel.label(largest) << "</text>";
  }
  // The step axis: first and last step under the frame.
  const double axis_y = top + kPanelHeight + 17;
  out << "<text x=\"" << Num(kLeft) << "\" y=\"" << Num(axis_y) << "\" font-size=\"" << kFont << "\">step 1</text>";
  if (n > 1) {
    out << "<text x=\"" << Num(kLeft + width) << "\" y=\"" << Num(axis_y) << "\" font-size=\"" << kFont << "\" "
        << "text-anchor=\"end\">step " << steps.back() << "</text>";
  }
}

}  // namespace

Markup TrainRunSvg(const v1::TrainRun& run) {
  Panel loss{"loss (batch mean, before the update)", {}, Loss, NAN, "", "#d62728"};
  Panel time{"step time (forward, loss, backward)", {}, [](double s) { return FormatSeconds(s); }, NAN, "",
             "#1f77b4", /*clip_outliers=*/true};
  std::vector<bool> disturbed;
  std::vector<uint32_t> steps;
  const int n = run.step_stats_size();
  // Every stride-th step, and the last: at most kMaxPlottedSteps.
  const int stride = static_cast<int>((static_cast<size_t>(n) + kMaxPlottedSteps - 2) / (kMaxPlottedSteps - 1));
  for (int i = 0; i < n; ++i) {
    if (i % std::max(1, stride) != 0 && i != n - 1) continue;
    const v1::TrainStep& step = run.step_stats(i);
    loss.values.push_back(step.loss());
    time.values.push_back(step.runtime_s());
    disturbed.push_back(step.disturbed());
    steps.push_back(static_cast<uint32_t>(i + 1));
  }
  if (!run.cost_source().empty() && run.predicted_runtime_s() > 0) {
    time.reference = run.predicted_runtime_s();
    time.reference_label = "predicted " + FormatSeconds(run.predicted_runtime_s()) + " from " + run.cost_source() +
                           " costs";
    time.title = "step time; predicted " + FormatSeconds(run.predicted_runtime_s()) + " dashed";
  }
  const double height = kTitleHeight + 2 * kPanelHeight + kGap + 40;
  HtmlWriter out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << Num(kWidth) << " " << Num(height)
      << "\" width=\"" << Num(kDrawnWidth) << "\" height=\"" << Num(height * kDrawnWidth / kWidth)
      << "\" font-family=\"system-ui, sans-serif\" role=\"img\" aria-labelledby=\"train-plot-title\">";
  const std::string title = "Run #" + std::to_string(run.id()) + ": " + run.model() + ", batch " +
                            std::to_string(run.batch_size()) + ", " + std::to_string(run.steps()) + " steps";
  out << "<title id=\"train-plot-title\">" << title << "</title>";
  out << "<text x=\"8\" y=\"18\" font-size=\"" << kTitleFont << "\" font-weight=\"bold\">" << title << "</text>";
  if (run.step_stats().empty()) {
    out << "<text x=\"8\" y=\"40\" font-size=\"" << kFont << "\">no steps recorded</text></svg>";
    return out.str();
  }
  out << "<text x=\"8\" y=\"37\" font-size=\"" << kFont << "\" fill=\"#57606a\">hollow dots: disturbed steps</text>";
  DrawPanel(out, loss, kTitleHeight + 16, steps, disturbed);
  DrawPanel(out, time, kTitleHeight + 16 + kPanelHeight + kGap, steps, disturbed);
  out << "</svg>";
  return out.str();
}

}  // namespace edgecost::service
