"""How a launch divides K, on the host: split-K's effective splits and stream-K's division of
the last wave (the device side: SplitKScheduler and StreamKScheduler,
pingpong.hopper.device.scheduler). The kernel, the workspace and the selection all use these
numbers."""

from typing import NamedTuple

from ...errors import ConfigError
from ..device.scheduler import stream_owner


def effective_splits(k: int, block_k: int, split_k: int) -> int:
    """Splits that all get k-steps: each takes ceil(k_steps / split_k) of them, so fewer
    splits may be needed (k_steps = 10, split_k = 4: 3 steps each, 4 splits; split_k = 8:
    2 steps each, 5 splits). The kernel and the workspace use this number."""
    k_steps = max(1, -(-k // block_k))
    per_split = -(-k_steps // max(1, min(split_k, k_steps)))
    return -(-k_steps // per_split)


#: a streaming program's share of the streamed k-steps is at least this many: a shorter
#: remainder is streamed by fewer programs (each share pays a partial tile's store and sum)
MIN_STREAM_STEPS = 8


def thin_last_wave(tiles: int, sms: int) -> bool:
    """Whether the last wave of `tiles` on `sms` SMs is partial and under half full: what
    stream-K streams (stream_k_split), and where decode's tiles double their rows
    (select.thin_second_wave)."""
    rest = tiles % sms
    return 0 < rest and 2 * rest < sms


def stream_k_split(tiles: int, k_steps: int, sms: int) -> tuple[int, int, int]:
    """(programs, data-parallel tiles, streaming programs) of a stream-K launch of `tiles`
    output tiles of `k_steps` k-steps each on `sms` SMs (StreamKScheduler).

    Data-parallel when the last wave is at least half full (or full); else the whole waves
    stay data-parallel and only the last, partial wave's tiles are streamed. (Streaming a
    full wave more would give each program more than a tile's k-steps, but programs that
    share a B column panel would then read it at different K offsets at the same time, and
    the panel is no longer shared in L2: streamed whole, it ran slower than data-parallel.)
    Streaming programs get at least MIN_STREAM_STEPS k-steps each."""
    if not thin_last_wave(tiles, sms):
        return min(sms, tiles), tiles, 1
    rest = tiles % sms  # tiles of the last wave
    dp = tiles - rest
    streaming = max(1, min(sms, rest * k_steps // MIN_STREAM_STEPS))
    return (sms if dp else streaming), dp, streaming


def stream_parts(tiles: int, k_steps: int, sms: int) -> int:
    """The most programs that share one tile's k-steps in a stream-K launch (the workspace's
    slots; 1: every tile data-parallel)."""
    _, dp, streaming = stream_k_split(tiles, k_steps, sms)
    total = (tiles - dp) * k_steps
    owner = stream_owner.fn
    return max((owner(t * k_steps + k_steps - 1, streaming, total) - owner(t * k_steps, streaming, total) + 1
                for t in range(tiles - dp)), default=1)


class StreamKChoice(NamedTuple):
    """What the stream-K hybrid does with a launch (stream_k_choice)."""

    kind: str  # "data-parallel" | "split-k" | "stream-k"
    programs: int
    dp_tiles: int
    streamers: int
    splits: int  # "split-k": the splits per tile that give the same units; else 1
    reason: str


def stream_k_choice(tiles: int, k_steps: int, sms: int) -> StreamKChoice:
    """The hybrid's decision for `tiles` output tiles of `k_steps` k-steps on `sms` SMs, and why
    (stream_k_split's rule):

        the last wave is full or at least half full           -> data-parallel
        otherwise its tiles' k-steps are streamed, at least MIN_STREAM_STEPS a program:
          no tile shared (every share whole tiles)            -> data-parallel (no fix-up)
          every tile streamed, split evenly at tile bounds    -> split-K with that many splits
            (the same units, without per-unit K ranges)
          else                                                -> stream-K

    Pure arithmetic: nothing here selects a config (pingpong.hopper.host.select does)."""
    for name, v in (("tiles", tiles), ("k_steps", k_steps), ("sms", sms)):
        if type(v) is not int or v < 1:
            raise ConfigError(f"{name} must be an int >= 1, got {v!r}")
    programs, dp, streamers = stream_k_split(tiles, k_steps, sms)
    rest = tiles - dp
    last = tiles % sms
    wave = (f"{_n(tiles, 'tile')} on {sms} SMs: " + ("whole waves" if last == 0 else
            f"the last wave {last}/{sms} full" + (" (under half)" if thin_last_wave(tiles, sms) else " (at least half)")))
    if rest == 0:
        return StreamKChoice("data-parallel", programs, dp, 1, 1, wave)
    total = rest * k_steps
    share = f"{total // streamers}" + (f"-{total // streamers + 1}" if total % streamers else "")
    least = f" (at least {MIN_STREAM_STEPS})" if total // streamers >= MIN_STREAM_STEPS else ""
    streamed = (f"{f'{dp} tiles data-parallel, ' if dp else ''}the k-steps of the last {_n(rest, 'tile')}, {total},"
                f" streamed by {_n(streamers, 'program')}, {share} each{least}")
    parts = stream_parts(tiles, k_steps, sms)
    if parts == 1:
        return StreamKChoice("data-parallel", programs, dp, streamers, 1, f"{wave}; {streamed}: whole tiles, no fix-up")
    splits = streamers // rest
    if dp == 0 and streamers % rest == 0 and k_steps % splits == 0:
        return StreamKChoice("split-k", programs, dp, streamers, splits,
                             f"{wave}; {streamed}: {splits} equal units a tile, split-K with {splits} splits")
    return StreamKChoice("stream-k", programs, dp, streamers, 1, f"{wave}; {streamed}; up to {parts} programs share a tile")


def _n(n: int, what: str) -> str:
    return f"{n} {what}" + ("s" if n != 1 else "")
