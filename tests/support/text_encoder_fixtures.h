// Test support for the text encoder tests: FLUX.1's tiny CLIP text encoder (text_encoder) and T5
// encoder (text_encoder_2) from the fixtures, each with its folder, config and full weights.
#pragma once

#include <string>

#include "models/text/clip_text_config.h"
#include "models/text/t5_config.h"
#include "sharding/state_dict.h"

namespace ditserve::testing {

// FixturesDir()/flux1-tiny/text_encoder.
std::string ClipTextEncoderDir();
// Its config.json; on error a failure of the current test and the default config.
text::ClipTextConfig ClipTextEncoderConfig();
// Every tensor of the checkpoint, replicated, float32 (LoadComponentFullFloat32).
sharding::ShardedStateDict ClipTextEncoderWeights();

// The same for FixturesDir()/flux1-tiny/text_encoder_2.
std::string T5EncoderDir();
text::T5Config T5EncoderConfig();
sharding::ShardedStateDict T5EncoderWeights();

}  // namespace ditserve::testing
