// Validation of metric and label names against the Prometheus data model, applied at registration
// so that an invalid name fails loudly at startup instead of producing an unscrapable /metrics.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "metrics/snapshot.h"

namespace ditserve::metrics {

// [a-zA-Z_][a-zA-Z0-9_]*. Prometheus also allows ':' but reserves it for recording rules
// ("should not be used by exporters or direct instrumentation"), so it is rejected here.
absl::Status ValidateMetricName(absl::string_view name);

// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved for Prometheus internals); "le" is
// rejected in histogram families because the serializer owns it.
absl::Status ValidateLabelName(absl::string_view name, MetricType family_type);

// Every name in `labels` passes ValidateLabelName. Values may be any UTF-8 string (escaped on output).
absl::Status ValidateLabels(const Labels& labels, MetricType family_type);

}  // namespace ditserve::metrics
