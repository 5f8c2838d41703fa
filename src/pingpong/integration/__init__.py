"""The torch integration under the public functions: the torch.library ops and their autograd
(ops), the eager path and its cached layer plans (direct), the ops lowered to direct calls in
inductor's generated code (inductor), and torch's N-D broadcasting reduced to one product
(batching). Nothing here is a kernel; everything reaches one through pingpong.runtime."""
