// Reading a golden.json written by tools/golden/ and comparing a row of our logits with the
// reference's, for the golden tests of the tiny models.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <utility>

#include <nlohmann/json.hpp>

namespace deepinfer::testing {

inline nlohmann::json read_golden(const std::filesystem::path& dir) {
  std::ifstream in(dir / "golden.json");
  return nlohmann::json::parse(in);
}

// Largest |ours - ref| over the row, and the tolerance for it: `relative` times (1 + max |ref|).
inline std::pair<double, double> row_error(std::span<const float> ours, const nlohmann::json& ref, double relative) {
  EXPECT_EQ(ours.size(), ref.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < ours.size() && i < ref.size(); ++i) {
    const double r = ref[i].get<double>();
    err = std::max(err, std::abs(ours[i] - r));
    scale = std::max(scale, std::abs(r));
  }
  return {err, relative * (1.0 + scale)};
}

}  // namespace deepinfer::testing
