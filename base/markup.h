// Text placed in HTML or SVG: names come from graph files and clients. Pages are written with an
// HtmlWriter, which escapes every string it is given; only string literals and Markup go out as
// they are, so a name cannot reach a page unescaped by a forgotten call.
#pragma once

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace edgecost {

// Escapes & < > " ' and replaces control characters (invalid in XML) with spaces.
std::string HtmlEscape(std::string_view text);

// HTML or SVG the program wrote: a string literal, or what an HtmlWriter wrote. Never a runtime
// string, so a function returning Markup returns a fragment, which a writer does not escape again.
class Markup {
 public:
  Markup() = default;
  template <size_t N>
  Markup(const char (&literal)[N]) : text_(literal) {}  // implicit: a literal is markup
  template <size_t N>
  Markup(char (&buffer)[N]) = delete;  // filled at run time: text

  const std::string& text() const& { return text_; }
  std::string text() && { return std::move(text_); }

 private:
  friend class HtmlWriter;
  explicit Markup(std::string text) : text_(std::move(text)) {}

  std::string text_;
};

class HtmlWriter {
 public:
  template <size_t N>
  HtmlWriter& operator<<(const char (&literal)[N]) {
    out_ += literal;
    return *this;
  }
  template <size_t N>
  HtmlWriter& operator<<(char (&buffer)[N]) {  // filled at run time: text
    return *this << std::string_view(buffer, std::find(buffer, buffer + N, '\0'));
  }
  HtmlWriter& operator<<(const Markup& markup) {
    out_ += markup.text();
    return *this;
  }
  // Text: std::string, std::string_view and a runtime const char* (a ternary of literals too).
  HtmlWriter& operator<<(std::string_view text) {
    out_ += HtmlEscape(text);
    return *this;
  }
  // Numbers as an ostream writes them. Templates, so that no conversion picks them (a const char*
  // would convert to bool); a bool or a char is neither text nor a number here: it does not compile.
  template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char>)
  HtmlWriter& operator<<(T value) {
    char digits[24];
    out_.append(digits, std::to_chars(digits, digits + sizeof digits, value).ptr);
    return *this;
  }
  template <std::floating_point T>
  HtmlWriter& operator<<(T value) {
    return WriteDouble(static_cast<double>(value));
  }

  bool empty() const { return out_.empty(); }
  Markup str() const { return Markup(out_); }

 private:
  HtmlWriter& WriteDouble(double value);  // %g, an ostream's default

  std::string out_;
};

}  // namespace edgecost
