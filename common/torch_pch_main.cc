// Anchor of the shared LibTorch precompiled header for executables (see common/CMakeLists.txt):
// executables compile with -fPIE, libraries with -fPIC, and GCC refuses a PCH built with the other.
#include <torch/torch.h>

int main() { return 0; }
