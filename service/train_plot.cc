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

constexpr double kWidth = 720;
constexpr double kLeft = 78;   // room for the value labels
constexpr double kRight = 16;
constexpr double kPanelHeight = 150;
constexpr double kTitleHeight = 44;
constexpr double kGap = 46;    // the step axis of the upper panel and the title of the lower

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
};

// A run of many steps is drawn by at most this many of them, evenly spaced, the last included: a
// 100,000-step run's page stays kilobytes.
constexpr size_t kMaxPlottedSteps = 500;

// One panel at `top`: a frame, min and max labels, the steps (1-based numbers in `steps`) as a line
// with a dot each.
void DrawPanel(HtmlWriter& out, const Panel& panel, double top, const std::vector<uint32_t>& steps,
               const std::vector<bool>& disturbed) {
  const double width = kWidth - kLeft - kRight;
  double low = *std::min_element(panel.values.begin(), panel.values.end());
  double high = *std::max_element(panel.values.begin(), panel.values.end());
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
  auto y = [&](double v) { return top + kPanelHeight - kPanelHeight * (v - low) / (high - low); };
  out << "<text x=\"" << Num(kLeft) << "\" y=\"" << Num(top - 8) << "\" font-size=\"13\" font-weight=\"bold\">"
      << panel.title << "</text>";
  out << "<rect x=\"" << Num(kLeft) << "\" y=\"" << Num(top) << "\" width=\"" << Num(width) << "\" height=\""
      << Num(kPanelHeight) << "\" fill=\"none\" stroke=\"#d0d7de\"/>";
  out << "<text x=\"" << Num(kLeft - 6) << "\" y=\"" << Num(top + 10) << "\" font-size=\"11\" text-anchor=\"end\">"
      << panel.label(high) << "</text>";
  out << "<text x=\"" << Num(kLeft - 6) << "\" y=\"" << Num(top + kPanelHeight) << "\" font-size=\"11\" "
      << "text-anchor=\"end\">" << panel.label(low) << "</text>";
  if (std::isfinite(panel.reference)) {
    out << "<line x1=\"" << Num(kLeft) << "\" x2=\"" << Num(kLeft + width) << "\" y1=\"" << Num(y(panel.reference))
        << "\" y2=\"" << Num(y(panel.reference)) << "\" stroke=\"#57606a\" stroke-dasharray=\"5 4\"><title>"
        << panel.reference_label << "</title></line>";
  }
  out << "<polyline fill=\"none\" stroke=\"" << panel.color << "\" stroke-width=\"1.5\" points=\"";
  for (size_t i = 0; i < n; ++i) out << (i ? " " : "") << Num(x(i)) << "," << Num(y(panel.values[i]));
  out << "\"/>";
  for (size_t i = 0; i < n; ++i) {
    const bool hollow = i < disturbed.size() && disturbed[i];
    out << "<circle cx=\"" << Num(x(i)) << "\" cy=\"" << Num(y(panel.values[i])) << "\" r=\"3\" fill=\""
        << (hollow ? "#ffffff" : panel.color) << "\" stroke=\"" << panel.color << "\"><title>step " << steps[i] << ": "
        << panel.label(panel.values[i]) << (hollow ? " (disturbed)" : "") << "</title></circle>";
  }
  // The step axis: first and last step under the frame.
  const double axis_y = top + kPanelHeight + 14;
  out << "<text x=\"" << Num(kLeft) << "\" y=\"" << Num(axis_y) << "\" font-size=\"11\">step 1</text>";
  if (n > 1) {
    out << "<text x=\"" << Num(kLeft + width) << "\" y=\"" << Num(axis_y) << "\" font-size=\"11\" "
        << "text-anchor=\"end\">step " << steps.back() << "</text>";
  }
}

}  // namespace

Markup TrainRunSvg(const v1::TrainRun& run) {
  Panel loss{"loss (mean over the batch, before each step's update)", {}, Loss, NAN, "", "#d62728"};
  Panel time{"step time: forward, loss and backward under the schedule", {},
             [](double s) { return FormatSeconds(s); }, NAN, "", "#1f77b4"};
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
    time.title = "step time, predicted " + FormatSeconds(run.predicted_runtime_s()) + " dashed";
  }
  const double height = kTitleHeight + 2 * kPanelHeight + kGap + 40;
  HtmlWriter out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << Num(kWidth) << " " << Num(height)
      << "\" width=\"" << Num(kWidth) << "\" height=\"" << Num(height)
      << "\" font-family=\"system-ui, sans-serif\" role=\"img\" aria-labelledby=\"train-plot-title\">";
  const std::string title = "Training run #" + std::to_string(run.id()) + ": " + run.model() + ", batch " +
                            std::to_string(run.batch_size()) + ", " + std::to_string(run.steps()) + " steps";
  out << "<title id=\"train-plot-title\">" << title << "</title>";
  out << "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" << title << "</text>";
  if (run.step_stats().empty()) {
    out << "<text x=\"8\" y=\"40\" font-size=\"12\">no steps recorded</text></svg>";
    return out.str();
  }
  out << "<text x=\"8\" y=\"34\" font-size=\"11\" fill=\"#57606a\">hollow dots: steps disturbed by other tasks or "
         "steal</text>";
  DrawPanel(out, loss, kTitleHeight + 16, steps, disturbed);
  DrawPanel(out, time, kTitleHeight + 16 + kPanelHeight + kGap, steps, disturbed);
  out << "</svg>";
  return out.str();
}

}  // namespace edgecost::service
