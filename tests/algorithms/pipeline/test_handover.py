"""The fetch stage's reused buffers: reuse, growth, and no reuse before the last read ends."""

from __future__ import annotations

import torch

from gnnrun.algorithms.pipeline.handover import HEADROOM, HandOverBuffers


class FakeEvent:
    """Stands in for the CUDA event recorded after a copy out of a buffer."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def synchronize(self) -> None:
        self.log.append(self.name)


def test_a_buffer_given_back_is_lent_again_without_a_new_allocation():
    pool = HandOverBuffers(pin=False)
    first = pool.take(100, (8,), torch.float32)
    assert first.rows.shape == (100, 8) and first.rows.dtype == torch.float32
    first.rows.fill_(1.0)
    pool.give_back(first)
    second = pool.take(90, (8,), torch.float32)  # smaller: fits in the same buffer
    assert second.rows.data_ptr() == first.rows.data_ptr()
    assert pool.take_stats()["buffers"] == 1


def test_buffers_in_use_are_never_lent_twice():
    pool = HandOverBuffers(pin=False)
    leases = [pool.take(50, (4,), torch.float32) for _ in range(3)]
    assert len({lease.rows.data_ptr() for lease in leases}) == 3
    pool.give_back(leases[1])
    again = pool.take(50, (4,), torch.float32)
    assert again.rows.data_ptr() == leases[1].rows.data_ptr()
    stats = pool.take_stats()
    assert stats["buffers"] == 3 and stats["most_lent"] == 3


def test_a_larger_minibatch_grows_the_buffer_to_the_largest_seen():
    pool = HandOverBuffers(pin=False)
    small = pool.take(10, (4,), torch.float32)
    pool.give_back(small)
    large = pool.take(1000, (4,), torch.float32)
    assert large.rows.shape == (1000, 4)
    assert large.storage.numel() == int(1000 * 4 * 4 * HEADROOM)
    pool.give_back(large)
    # The small buffer went when it did not fit: one buffer left, the large one.
    assert pool.take(10, (4,), torch.float32).storage.data_ptr() == large.storage.data_ptr()
    stats = pool.take_stats()
    assert stats["buffers"] == 2 and stats["grown"] == 1 and stats["takes"] == 3


def test_reuse_waits_for_the_copy_that_read_the_buffer():
    log: list[str] = []
    pool = HandOverBuffers(pin=False)
    lease = pool.take(10, (2,), torch.float32)
    pool.give_back(lease, FakeEvent(log, "copy of minibatch 0"))
    assert log == []  # giving back does not wait
    pool.take(10, (2,), torch.float32)
    assert log == ["copy of minibatch 0"]


def test_rows_of_any_dtype_and_shape_fit_a_byte_buffer():
    pool = HandOverBuffers(pin=False)
    lease = pool.take(7, (3, 2), torch.float16)
    lease.rows.copy_(torch.arange(42, dtype=torch.float16).view(7, 3, 2))
    assert lease.rows.sum().item() == sum(range(42))
    empty = pool.take(0, (5,), torch.float32)
    assert empty.rows.shape == (0, 5)
