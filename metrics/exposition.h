// The /metrics body: families collected from prometheus::Collectables, written by prometheus-cpp's
// TextSerializer (text format 0.0.4).
//
// What this adds to prometheus-cpp 1.0.1: its TextSerializer writes HELP text unescaped, so a '\'
// or a newline in a help text would corrupt the exposition; SerializeTextExposition escapes them
// ("\\", "\n", as the format requires) before serialising. It also sorts each family's series by
// label set (prometheus-cpp's Family keeps them in a hash map), so the body is stable from one
// scrape to the next. Everything else (label value escaping, number formatting: 16 significant
// digits, "Nan", "+Inf"; family layout: "_count", "_sum", then the buckets of each histogram
// series) is prometheus-cpp's. A family without series is never written (prometheus-cpp's Family
// and our collectables omit it).
//
// Thread-safety: pure functions; the sources' Collect must tolerate concurrent calls (prometheus-cpp's
// Registry and our collectables do).
#pragma once

#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace ditserve::metrics {

inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Collects every source, in order. The sources must not share a family name (nothing merges or
// drops duplicates: each family is written as collected).
std::vector<prometheus::MetricFamily> CollectAll(
    const std::vector<const prometheus::Collectable*>& sources);

// The text exposition of `families` (HELP escaped, see above).
std::string SerializeTextExposition(std::vector<prometheus::MetricFamily> families);

// SerializeTextExposition(CollectAll(sources)).
std::string RenderTextExposition(const std::vector<const prometheus::Collectable*>& sources);

}  // namespace ditserve::metrics
