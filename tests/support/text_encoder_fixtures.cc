#include "tests/support/text_encoder_fixtures.h"

#include "tests/support/fixtures.h"

namespace ditserve::testing {

std::string ClipTextEncoderDir() { return FixturesDir() + "/flux1-tiny/text_encoder"; }

text::ClipTextConfig ClipTextEncoderConfig() {
  return ValueOrAddFailure(text::LoadClipTextConfig(ClipTextEncoderDir() + "/config.json"));
}

sharding::ShardedStateDict ClipTextEncoderWeights() {
  return LoadComponentFullFloat32(ClipTextEncoderDir());
}

std::string T5EncoderDir() { return FixturesDir() + "/flux1-tiny/text_encoder_2"; }

text::T5Config T5EncoderConfig() {
  return ValueOrAddFailure(text::LoadT5Config(T5EncoderDir() + "/config.json"));
}

sharding::ShardedStateDict T5EncoderWeights() { return LoadComponentFullFloat32(T5EncoderDir()); }

}  // namespace ditserve::testing
