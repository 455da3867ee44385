#include "server/image_store.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ditserve::server {

ImageStore::ImageStore(ImageStoreOptions options, std::function<Clock::time_point()> now)
    : options_(options), now_(std::move(now)) {}

std::string ImageStore::NewId(const std::string& extension) {
  static thread_local std::random_device device;
  std::string id = "img_";
  for (int i = 0; i < 4; ++i) absl::StrAppend(&id, absl::StrFormat("%08x", device()));
  return absl::StrCat(id, ".", extension);
}

void ImageStore::MakeRoom(uint64_t incoming, Clock::time_point now) {
  while (!order_.empty()) {
    auto it = images_.find(order_.front());
    const bool expired = it == images_.end() || it->second.expires <= now;
    if (!expired && bytes_ + incoming <= options_.max_bytes) break;
    if (it != images_.end()) {
      bytes_ -= it->second.bytes.size();
      images_.erase(it);
    }
    order_.pop_front();
  }
}

absl::StatusOr<std::vector<std::string>> ImageStore::Put(const std::vector<std::string>& images,
                                                         const std::string& extension,
                                                         const std::string& content_type) {
  if (!enabled()) {
    return absl::FailedPreconditionError("the image store is off (--http-image-store-bytes 0)");
  }
  uint64_t total = 0;
  for (const std::string& image : images) total += image.size();
  if (total > options_.max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("response_format \"url\": the call's images are ", total,
                     " bytes, more than the image store holds (--http-image-store-bytes ",
                     options_.max_bytes, "); ask for \"b64_json\" or fewer images"));
  }
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  MakeRoom(total, now);
  std::vector<std::string> ids;
  ids.reserve(images.size());
  for (const std::string& image : images) {
    std::string id = NewId(extension);
    images_[id] = Image{image, content_type, now + options_.ttl};
    order_.push_back(id);
    bytes_ += image.size();
    ids.push_back(std::move(id));
  }
  return ids;
}

std::optional<ImageStore::Image> ImageStore::Get(const std::string& id) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  MakeRoom(0, now);
  auto it = images_.find(id);
  if (it == images_.end()) return std::nullopt;
  return it->second;
}

size_t ImageStore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  MakeRoom(0, now_());
  return images_.size();
}

uint64_t ImageStore::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  MakeRoom(0, now_());
  return bytes_;
}

}  // namespace ditserve::server
