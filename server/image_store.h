// ImageStore: the result images of `response_format: "url"` calls of the HTTP API, kept in memory
// for GET /v1/images/files/{id} (server/http_api.h). Bounded twice: by bytes (--http-image-store-
// bytes; the oldest images go first to make room) and by time (--http-image-store-ttl; an image is
// gone once its time is up, whether or not it was fetched). Nothing is written to disk; a restart
// forgets every image.
//
// Ids are "img_" + 32 hex digits of std::random_device (128 bits, not guessable) + "." + the
// format's extension ("png", "jpeg", "webp"). Thread-safe (one mutex; Put and Get copy the bytes
// in and out under it, so a fetched image stays whole even if it is evicted meanwhile).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace ditserve::server {

struct ImageStoreOptions {
  uint64_t max_bytes = 0;  // 0: the store is off (Put refuses)
  std::chrono::milliseconds ttl{std::chrono::hours(1)};
};

class ImageStore {
 public:
  using Clock = std::chrono::steady_clock;
  struct Image {
    std::string bytes;
    std::string content_type;  // "image/png", ...
    Clock::time_point expires;
  };

  // `now` is the clock (tests pass their own).
  explicit ImageStore(ImageStoreOptions options,
                      std::function<Clock::time_point()> now = &Clock::now);

  bool enabled() const { return options_.max_bytes > 0; }
  const ImageStoreOptions& options() const { return options_; }

  // Stores the images of one call, all or none, and returns their ids in order. `extension` is the
  // format's name ("png", "jpeg", "webp"). FAILED_PRECONDITION when the store is off or the images
  // together are larger than max_bytes (older images are evicted to make room otherwise).
  absl::StatusOr<std::vector<std::string>> Put(const std::vector<std::string>& images,
                                               const std::string& extension,
                                               const std::string& content_type);
  // The image, while it is kept; nullopt when unknown, expired or evicted.
  std::optional<Image> Get(const std::string& id);

  // What is kept now (after dropping the expired images).
  size_t size();
  uint64_t bytes();

 private:
  // Drops the expired images, then the oldest until `incoming` more bytes fit. Holds mu_.
  void MakeRoom(uint64_t incoming, Clock::time_point now);
  std::string NewId(const std::string& extension);

  const ImageStoreOptions options_;
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  std::list<std::string> order_;  // ids, oldest first (every image has the same ttl)
  std::unordered_map<std::string, Image> images_;
  uint64_t bytes_ = 0;
};

}  // namespace ditserve::server
