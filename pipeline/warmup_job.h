// The job a worker runs once at load, before it reports ready, so that the first real request does
// not pay for the kernels' first launch (cuBLAS/cuDNN heuristics and workspaces, the CUDA caching
// allocator's first blocks, lazy module loading): the whole path of a request of the given size,
// text encoding, two denoising steps and the VAE decode, on a fixed prompt (or zero embeddings for
// a model served from precomputed embeddings). Every rank builds the same job, so its collectives
// pair up as a real job's do.
//
// Pure function of its arguments; thread-safe.
#pragma once

#include <cstdint>

#include "pipeline/job.h"

namespace ditserve::pipeline {

// height / width 0: the card's defaults. The job's fields are defaulted as the frontend defaults a
// request's (guidance, sequence length, output kind); a model that needs input images gets its
// fewest (min_images) of mid grey, prepared as the frontend prepares an image of the output's size.
GenerationJob WarmupJob(const ModelCard& card, int64_t height, int64_t width);

}  // namespace ditserve::pipeline
