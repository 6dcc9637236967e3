"""A service as it runs: the kernel with the feature packages plugged in."""
