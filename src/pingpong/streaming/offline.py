"""Registers the streaming kernels with `pingpong.runtime.compile` (`pingpong isa --kernel vector_add`)."""

from ..runtime.compile import Launch, register


@register("vector_add", targets=("sm_90a", "gfx942"))
def build(target: str) -> Launch:
    """Persistent vector add: TMA ring + mbarriers (sm_90a), buffer loads to LDS (gfx942)."""
    if target == "sm_90a":
        from .hopper import build as build_hopper

        return build_hopper("float32")
    from .gfx942 import build as build_gfx942

    return build_gfx942("float32")
