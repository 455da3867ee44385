// server/image_store.h: the response_format "url" images kept in memory, bounded by bytes (oldest
// evicted first) and by time to live, all or none per call, off when max_bytes is 0; ids not
// guessable and carrying the format's extension.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "server/image_store.h"

namespace ditserve::server {
namespace {

using std::chrono::seconds;

// A store on a clock the test moves.
struct Store {
  explicit Store(uint64_t max_bytes, seconds ttl = seconds(60))
      : store({max_bytes, ttl}, [this] { return now; }) {}
  ImageStore::Clock::time_point now = ImageStore::Clock::time_point() + std::chrono::hours(1);
  ImageStore store;
};

TEST(ImageStore, KeepsImagesUnderUnguessableIdsWithTheirType) {
  Store s(1000);
  auto ids = s.store.Put({"first", "second"}, "jpeg", "image/jpeg");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 2u);
  std::set<std::string> seen;
  for (const std::string& id : *ids) {
    EXPECT_TRUE(absl::StartsWith(id, "img_")) << id;
    EXPECT_TRUE(absl::EndsWith(id, ".jpeg")) << id;
    EXPECT_EQ(id.size(), 4 + 32 + 5) << id;  // 128 random bits in hex
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 2u);
  auto first = s.store.Get((*ids)[0]);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->bytes, "first");
  EXPECT_EQ(first->content_type, "image/jpeg");
  EXPECT_EQ(s.store.Get((*ids)[1])->bytes, "second");
  EXPECT_FALSE(s.store.Get("img_00000000000000000000000000000000.jpeg").has_value());
  EXPECT_EQ(s.store.size(), 2u);
  EXPECT_EQ(s.store.bytes(), 11u);
}

TEST(ImageStore, ImagesExpireAfterTheirTimeToLive) {
  Store s(1000, seconds(10));
  auto a = s.store.Put({"a"}, "png", "image/png");
  ASSERT_TRUE(a.ok());
  s.now += seconds(6);
  auto b = s.store.Put({"b"}, "png", "image/png");
  ASSERT_TRUE(b.ok());
  s.now += seconds(3);  // a at 9 s, b at 3 s
  EXPECT_TRUE(s.store.Get((*a)[0]).has_value());
  s.now += seconds(1);  // a at 10 s: gone
  EXPECT_FALSE(s.store.Get((*a)[0]).has_value());
  EXPECT_TRUE(s.store.Get((*b)[0]).has_value());
  EXPECT_EQ(s.store.size(), 1u);
  s.now += seconds(6);
  EXPECT_FALSE(s.store.Get((*b)[0]).has_value());
  EXPECT_EQ(s.store.bytes(), 0u);
}

TEST(ImageStore, OldestImagesMakeRoomForNewOnes) {
  Store s(10);
  auto a = s.store.Put({"aaaa"}, "png", "image/png");
  auto b = s.store.Put({"bbbb"}, "png", "image/png");
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = s.store.Put({"cccc"}, "png", "image/png");  // 12 > 10: a goes
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(s.store.Get((*a)[0]).has_value());
  EXPECT_TRUE(s.store.Get((*b)[0]).has_value());
  EXPECT_TRUE(s.store.Get((*c)[0]).has_value());
  EXPECT_LE(s.store.bytes(), 10u);
  // A call's images together must fit: refused whole, nothing evicted for it.
  auto big = s.store.Put({"123456", "123456"}, "png", "image/png");
  EXPECT_EQ(big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(big.status().message(), "--http-image-store-bytes 10"))
      << big.status();
  EXPECT_TRUE(s.store.Get((*b)[0]).has_value());
  // Exactly the store's size fits (everything older goes).
  auto full = s.store.Put({"0123456789"}, "png", "image/png");
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(s.store.size(), 1u);
}

TEST(ImageStore, OffWhenItHasNoBytes) {
  Store s(0);
  EXPECT_FALSE(s.store.enabled());
  auto r = s.store.Put({"a"}, "png", "image/png");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(s.store.Get("img_x.png").has_value());
}

TEST(ImageStore, ConcurrentPutsAndGetsStayWithinTheBound) {
  ImageStore store({1000, seconds(60)});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto ids = store.Put({std::string(100, 'x')}, "png", "image/png");
        ASSERT_TRUE(ids.ok());
        auto got = store.Get((*ids)[0]);
        if (got) EXPECT_EQ(got->bytes.size(), 100u);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(store.bytes(), 1000u);
  EXPECT_EQ(store.size(), 10u);
}

}  // namespace
}  // namespace ditserve::server
