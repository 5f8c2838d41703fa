"""FP8 scale groups for the training tests (test_fp8_training.py on the CPU, test_fp8_train_gpu.py
on a GPU): which (rows, columns) group of each operand one scale covers, written from the
recipes' definition (not read from pingpong), and the group maxima of a tensor."""

import torch

FMAX = 448.0  # e4m3's largest finite value

#: quantize_fp8's granularities as groups (rows, columns) of the tensor it quantizes; -1: the whole axis
QUANT_GROUPS = {"tensor": (-1, -1), "row": (1, -1), "block": (1, 128), "block128x128": (128, 128)}

#: each product's operands, a (rows, contraction) and b (contraction, columns), as
#: Y = X·Wᵀ, dX = dY·W, dW = dYᵀ·X, and the (rows, cols) groups one scale covers in each: one
#: scale is constant along the contraction within its group
PRODUCT_GROUPS = {
    "tensor": {"Y": ((-1, -1), (-1, -1)), "dX": ((-1, -1), (-1, -1)), "dW": ((-1, -1), (-1, -1))},
    "row": {"Y": ((1, -1), (-1, 1)), "dX": ((1, -1), (-1, 1)), "dW": ((1, -1), (-1, 1))},
    "block": {"Y": ((1, 128), (128, 128)), "dX": ((1, 128), (128, 128)), "dW": ((1, 128), (128, 1))},
}
PRODUCT_GROUPS["row_gw_hp"] = PRODUCT_GROUPS["row"]
#: torchao's recipes scale as the pingpong recipes they name (pingpong.fp8_training.TORCHAO_NAMES)
PRODUCT_GROUPS.update({"tensorwise": PRODUCT_GROUPS["tensor"], "rowwise": PRODUCT_GROUPS["row"],
                       "rowwise_with_gw_hp": PRODUCT_GROUPS["row"]})


def group_amax(t, group):
    """amax of each (rows, cols) group of a 2-D t (-1: the whole axis; partial groups at the
    ends), as a (row groups, column groups) tensor of t's dtype."""
    R, C = t.shape
    gr, gc = (R if group[0] == -1 else group[0]), (C if group[1] == -1 else group[1])
    padded = t.new_zeros(-(-R // gr) * gr, -(-C // gc) * gc)
    padded[:R, :C] = t.abs()
    return padded.view(padded.shape[0] // gr, gr, padded.shape[1] // gc, gc).amax((1, 3))


def per_element(s, shape):
    """A group scale (scalar, per row or column, or per 128-block along an axis) expanded to
    every element of a `shape` operand, in float64."""
    s = s.double().reshape(s.shape if s.dim() == 2 else (1, 1))
    for d in (0, 1):
        if s.shape[d] not in (1, shape[d]):
            s = s.repeat_interleave(128, d).narrow(d, 0, shape[d])
    return s.expand(shape)


def scales_of(t, group):
    """float64 scale of every element of t: amax / 448 of its group."""
    return per_element(group_amax(t.double(), group) / FMAX, t.shape)
