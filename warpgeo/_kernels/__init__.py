"""Pure Warp kernels (no torch import). Each file is one Warp module, compiled once and cached."""
