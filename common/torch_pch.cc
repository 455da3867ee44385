// Anchor of the shared LibTorch precompiled header (see common/CMakeLists.txt).
#include <torch/torch.h>
