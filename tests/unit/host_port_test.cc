// common/host_port.h: the HOST:PORT parser behind --listen, --metrics-listen and the worker's
// listen address.
#include "common/host_port.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace ditserve {
namespace {

TEST(ParseHostPort, SplitsHostAndPort) {
  struct Case {
    const char* value;
    const char* host;
    int port;
  };
  for (const Case& c : {Case{"127.0.0.1:50051", "127.0.0.1", 50051}, Case{"0.0.0.0:0", "0.0.0.0", 0},
                        Case{"localhost:65535", "localhost", 65535},
                        Case{"worker-0.svc:7000", "worker-0.svc", 7000}}) {
    auto hp = ParseHostPort(c.value, "--listen");
    ASSERT_TRUE(hp.ok()) << c.value << ": " << hp.status();
    EXPECT_EQ(hp->host, c.host) << c.value;
    EXPECT_EQ(hp->port, c.port) << c.value;
  }
}

TEST(ParseHostPort, StripsTheBracketsOfIpv6Literals) {
  auto loopback = ParseHostPort("[::1]:9464", "--metrics-listen");
  ASSERT_TRUE(loopback.ok()) << loopback.status();
  EXPECT_EQ(loopback->host, "::1");
  EXPECT_EQ(loopback->port, 9464);
  auto any = ParseHostPort("[::]:0", "--listen");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->host, "::");
  EXPECT_EQ(any->port, 0);
}

TEST(ParseHostPort, RejectsMalformedAddressesNamingTheFlagAndValue) {
  for (const char* bad : {"", "9464", ":9464", "host:", "host:x", "host:70000", "host:-1",
                          "host:+80", "host: 80", "host:123456", "[]:1", "[::1:80", "::1:80",
                          "[::1]", "[::1]x:80"}) {
    auto hp = ParseHostPort(bad, "--metrics-listen");
    ASSERT_FALSE(hp.ok()) << bad << " -> " << hp->host << " " << hp->port;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    const std::string message(hp.status().message());
    EXPECT_TRUE(absl::StartsWith(message, "--metrics-listen must be HOST:PORT")) << message;
    EXPECT_TRUE(absl::StrContains(message, std::string("'") + bad + "'")) << message;
  }
}

}  // namespace
}  // namespace ditserve
