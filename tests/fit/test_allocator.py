"""The caching-allocator model against the rules of c10/cuda/CUDACachingAllocator.cpp."""

from __future__ import annotations

from cudamagic.fit import allocator as A

MIB = 1 << 20


def test_rounding_and_segment_sizes():
    assert [A.round_size(n) for n in (0, 1, 512, 513)] == [0, 512, 512, 1024]
    assert A.segment_size(512) == 2 * MIB  # small pool
    assert A.segment_size(1 * MIB) == 2 * MIB
    assert A.segment_size(1 * MIB + 512) == 20 * MIB  # large, under 10 MiB
    assert A.segment_size(10 * MIB) == 10 * MIB  # rounded to 2 MiB
    assert A.segment_size(11 * MIB) == 12 * MIB


def test_small_requests_share_a_2_mib_segment():
    m = A.CachingAllocatorModel()
    for _ in range(4):
        m.malloc(512 * 1024)
    assert m.reserved_bytes == 2 * MIB and m.allocated_bytes == 2 * MIB
    m.malloc(1)
    assert m.reserved_bytes == 4 * MIB


def test_large_requests_split_a_20_mib_segment_and_reuse_it_after_free():
    m = A.CachingAllocatorModel()
    a = m.malloc(5 * MIB)
    b = m.malloc(5 * MIB)
    assert m.reserved_bytes == 20 * MIB  # the second came from the first's remainder
    m.free(a)
    m.free(b)  # merged back into one 20 MiB free block
    m.malloc(18 * MIB)
    assert m.reserved_bytes == 20 * MIB
    m.malloc(3 * MIB)  # 2 MiB left, not enough: a new segment
    assert m.reserved_bytes == 40 * MIB


def test_a_remainder_of_1_mib_or_less_is_not_split_in_the_large_pool():
    m = A.CachingAllocatorModel()
    m.malloc(19 * MIB)  # rest 1 MiB: not split, the block keeps all 20 MiB
    assert m.allocated_bytes == 20 * MIB
    m.malloc(2 * MIB)
    assert m.reserved_bytes == 40 * MIB


def test_fragmentation_needs_a_new_segment_that_expandable_segments_would_avoid():
    m = A.CachingAllocatorModel()
    blocks = [m.malloc(12 * MIB) for _ in range(3)]
    m.free(blocks[0])
    m.free(blocks[2])  # 24 MiB free, in two separate 12 MiB segments
    m.malloc(20 * MIB)
    assert m.reserved_bytes == 56 * MIB
    assert A.expandable_reserved(m.peak_allocated_bytes) == 36 * MIB


def test_cublas_workspace_sizes():
    assert A.cublas_workspace_bytes(9, env={}) == 32 * MIB
    assert A.cublas_workspace_bytes(8, env={}) == 8 * MIB + 128 * 1024
    assert A.cublas_workspace_bytes(9, env={"CUBLAS_WORKSPACE_CONFIG": ":16:8"}) == 128 * 1024
    assert A.cublas_workspace_bytes(9, env={"CUBLAS_WORKSPACE_CONFIG": ":4096:2:16:8"}) == (
        8 * MIB + 128 * 1024
    )


def test_gpu_table_sizes_are_not_above_what_the_board_shows():
    """``--gpu T4`` is the memory a T4 has (15079 MiB in nvidia-smi, ECC on), not 16 GiB.

    With the datasheet's 16 GiB, a batch found for a T4 ran out of memory on one (Colab's GPU).
    Data-centre GDDR boards lose 1/16 to ECC.
    """
    from cudamagic.fit import gpus

    assert gpus.lookup("T4")[1] <= 15079 * (1 << 20)
    for name, datasheet_gib in (("A10", 24), ("L4", 24), ("L40S", 48)):
        assert gpus.lookup(name)[1] <= datasheet_gib * (1 << 30) * 15 // 16, name
