#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace ditserve {

absl::Status SetupLogging(const LogOptions& options) {
  spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  // from_str maps unknown names to "off"; only accept "off" when asked for.
  if (level == spdlog::level::off && options.level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-level: unknown level '", options.level,
        "' (expected trace, debug, info, warn, error or off)"));
  }
  std::string pattern;
  if (options.format == "text") {
    pattern = absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [", options.name, "] [%^%l%$] %v");
  } else if (options.format == "json") {
    pattern = absl::StrCat(R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","proc":")", options.name,
                           R"(","level":"%l","msg":"%v"})");
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-format: unknown format '", options.format, "' (expected text or json)"));
  }
  auto logger = spdlog::stderr_color_mt(options.name.empty() ? "ditserve" : options.name);
  logger->set_level(level);
  logger->set_pattern(pattern, options.format == "json" ? spdlog::pattern_time_type::utc
                                                        : spdlog::pattern_time_type::local);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace ditserve
