"""The Hopper kernels' device parts: @gluon.jit functions and aggregates that the kernels
(pingpong.hopper.kernels) are composed from. Nothing here runs on the host."""
