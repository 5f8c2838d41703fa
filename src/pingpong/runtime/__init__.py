"""The runtime: the call plan and its cache, the direct launcher, kernel registration and
offline compilation, device facts, address arithmetic."""
