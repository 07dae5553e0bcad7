#include "base/markup.h"

#include <string>
#include <string_view>
#include <type_traits>

#include <gtest/gtest.h>

namespace edgecost {
namespace {

// Markup comes from literals and writers only: no runtime string becomes markup.
static_assert(std::is_constructible_v<Markup, const char (&)[4]>);
static_assert(!std::is_constructible_v<Markup, char (&)[4]>);
static_assert(!std::is_constructible_v<Markup, const char*>);
static_assert(!std::is_constructible_v<Markup, std::string>);
static_assert(!std::is_constructible_v<Markup, std::string_view>);

TEST(HtmlEscape, EscapesMarkupAndQuotesAndBlanksControlCharacters) {
  EXPECT_EQ(HtmlEscape("'\"&<>"), "&#39;&quot;&amp;&lt;&gt;");
  EXPECT_EQ(HtmlEscape(std::string_view("a\x01z\0\x1f\n\t", 7)), "a z  \n\t");
  EXPECT_EQ(HtmlEscape("caf\xc3\xa9 \u2192"), "caf\xc3\xa9 \u2192");  // UTF-8 as it is
}

TEST(HtmlWriter, WritesLiteralsAsMarkupAndEscapesEveryString) {
  const std::string script = "<script>alert(1)</script>";
  const std::string attribute = "\"><img src=x onerror=alert(1)>";
  const char* pointer = "<b>";  // a const char* may come from anywhere: text
  char buffer[8] = "<i>";       // filled at run time: text
  HtmlWriter out;
  out << "<p title=\"" << attribute << "\">" << script << std::string_view("&") << pointer << buffer << "</p>";
  EXPECT_EQ(out.str().text(),
            "<p title=\"&quot;&gt;&lt;img src=x onerror=alert(1)&gt;\">&lt;script&gt;alert(1)&lt;/script&gt;&amp;"
            "&lt;b&gt;&lt;i&gt;</p>");
}

TEST(HtmlWriter, ATernaryOfLiteralsIsTextAndMarkupIsNotEscapedAgain) {
  const bool yes = true;
  HtmlWriter cell;
  cell << "<td>" << std::string("a<b") << "</td>";
  const Markup fragment = cell.str();
  HtmlWriter row;
  row << "<tr>" << fragment << (yes ? "<br>" : "") << (yes ? Markup("<br>") : Markup()) << Markup("<hr>") << "</tr>";
  EXPECT_EQ(row.str().text(), "<tr><td>a&lt;b</td>&lt;br&gt;<br><hr></tr>");
  EXPECT_EQ(Markup().text(), "");
}

TEST(HtmlWriter, WritesNumbersAsAnOstreamDoes) {
  HtmlWriter out;
  out << 42 << " " << -7L << " " << uint64_t{18446744073709551615u} << " " << size_t{0} << " " << 0.000123 << " "
      << 1234567.0 << " " << 2.5f << " " << 1e-300;
  EXPECT_EQ(out.str().text(), "42 -7 18446744073709551615 0 0.000123 1.23457e+06 2.5 1e-300");
}

TEST(HtmlWriter, ReplacesControlCharactersInText) {
  HtmlWriter out;
  out << std::string("a\x01\x7f\rb\n");
  EXPECT_EQ(out.str().text(), "a \x7f b\n");
  EXPECT_TRUE(HtmlWriter().empty());
  EXPECT_FALSE(out.empty());
}

}  // namespace
}  // namespace edgecost
