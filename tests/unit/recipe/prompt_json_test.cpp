#include "recipe/prompt_json.h"

#include <gtest/gtest.h>

namespace deepinfer::recipe {
namespace {

TEST(PromptJson, FloatStyles) {
  struct Case {
    double v;
    const char* rust;
    const char* rust_plus;
    const char* python;
  };
  const Case cases[] = {
      {0.1, "0.1", "0.1", "0.1"},
      {1e-5, "0.00001", "0.00001", "1e-05"},
      {1.5e-7, "1.5e-7", "1.5e-7", "1.5e-07"},
      {1.5e-6, "1.5e-6", "1.5e-6", "1.5e-06"},
      {1e-4, "0.0001", "0.0001", "0.0001"},
      {1e20, "1e20", "1e+20", "1e+20"},
      {1e16, "1e16", "1e+16", "1e+16"},
      {1e15, "1000000000000000.0", "1000000000000000.0", "1000000000000000.0"},
      {123456789012345678.0, "1.2345678901234568e17", "1.2345678901234568e+17",
       "1.2345678901234568e+17"},
      {-0.0, "-0.0", "-0.0", "-0.0"},
      {1.0, "1.0", "1.0", "1.0"},
      {12345.678, "12345.678", "12345.678", "12345.678"},
      {5e-324, "5e-324", "5e-324", "5e-324"},
      {1e300, "1e300", "1e+300", "1e+300"},
      {-2.5e-9, "-2.5e-9", "-2.5e-9", "-2.5e-09"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(format_float(c.v, FloatStyle::kRust), c.rust);
    EXPECT_EQ(format_float(c.v, FloatStyle::kRustPlus), c.rust_plus);
    EXPECT_EQ(format_float(c.v, FloatStyle::kPython), c.python);
  }
}

TEST(PromptJson, PythonSpacingOrderAndEscapes) {
  auto j = nlohmann::ordered_json::parse(
      R"({"z":1,"a":[true,null,-3,18446744073709551615],"s":"日本\"\\\n\t\u0001\u007f/","o":{}})");
  EXPECT_EQ(dump_prompt_json(j, FloatStyle::kPython),
            "{\"z\": 1, \"a\": [true, null, -3, 18446744073709551615], "
            "\"s\": \"日本\\\"\\\\\\n\\t\\u0001\x7f/\", \"o\": {}}");
}

}  // namespace
}  // namespace deepinfer::recipe
