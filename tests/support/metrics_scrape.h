// Test support for the metric-set tests: one collectable rendered by metrics/exposition.h and read
// back by the strict parser (exposition_parser.h), and one sample's value, each failing the calling
// test (gtest) when the text does not parse or the series is missing. Header-only.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <prometheus/collectable.h>

#include "metrics/exposition.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {

inline ParsedExposition Scrape(const prometheus::Collectable& source) {
  auto parsed = ParseTextExposition(RenderTextExposition({&source}));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : ParsedExposition{};
}

inline double Value(const ParsedExposition& p, const std::string& name, const Labels& labels) {
  const ParsedSample* s = p.Find(name, labels);
  EXPECT_NE(s, nullptr) << name;
  return s ? s->value : -1;
}

}  // namespace ditserve::metrics
