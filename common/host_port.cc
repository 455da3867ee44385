#include "common/host_port.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ditserve {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view value, absl::string_view flag) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be HOST:PORT (", why, "), got '", value, "'"));
  };
  absl::string_view host, port_text;
  if (!value.empty() && value.front() == '[') {  // [v6]:port
    const size_t close = value.find(']');
    if (close == absl::string_view::npos) return bad("no ']' after the IPv6 host");
    host = value.substr(1, close - 1);
    const absl::string_view rest = value.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return bad("no ':' and port after the ']'");
    port_text = rest.substr(1);
  } else {
    const size_t colon = value.rfind(':');
    if (colon == absl::string_view::npos) return bad("no port");
    host = value.substr(0, colon);
    port_text = value.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return bad("an IPv6 host goes in brackets, e.g. [::1]:9464");
    }
  }
  if (host.empty()) return bad("empty host");
  int port = -1;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  return HostPort{std::string(host), port};
}

}  // namespace ditserve
