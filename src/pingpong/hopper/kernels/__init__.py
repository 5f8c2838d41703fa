"""The Hopper kernels (@gluon.jit entry points), each composed from the device parts
(pingpong.hopper.device); their launches are the host side's (pingpong.hopper.host)."""
