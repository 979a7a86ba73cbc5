"""core.gcpause: the collector paused for a burst of objects, and put back as it was."""

import gc
import weakref

import pytest

from cudamagic.core.gcpause import paused_gc


class Node:
    """A small object that can sit in a reference cycle and be watched by a weakref."""


@pytest.fixture
def gc_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.mark.parametrize("promote", [False, True])
def test_the_collector_is_off_inside_and_as_it_was_after(gc_on, promote):
    with paused_gc(promote=promote):
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with paused_gc(promote=promote):
        assert not gc.isenabled()
    assert not gc.isenabled()  # a program that turned it off keeps it off


def test_promoted_objects_skip_the_young_generations(gc_on):
    with paused_gc(promote=True):
        made = [Node() for _ in range(1000)]
    young = {id(o) for o in gc.get_objects(0)} | {id(o) for o in gc.get_objects(1)}
    old = {id(o) for o in gc.get_objects(2)}
    assert not any(id(o) in young for o in made)
    assert all(id(o) in old for o in made)


def test_young_garbage_cycles_are_collected_before_promotion(gc_on):
    gc.collect()
    dead = cycle()  # unreachable, waiting in the youngest generation
    assert dead() is not None
    with paused_gc(promote=True):
        pass
    assert dead() is None  # collected, not moved to the oldest generation with the burst


def test_cycles_made_inside_are_collected_after_a_plain_pause(gc_on):
    with paused_gc():
        dead = cycle()
    assert dead() is not None
    gc.collect()
    assert dead() is None


def test_objects_the_program_froze_stay_frozen(gc_on):
    gc.collect()
    keep = [Node() for _ in range(10)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with paused_gc(promote=True):
            [Node() for _ in range(10)]
        assert gc.get_freeze_count() == frozen  # not unfrozen behind the program's back
    finally:
        gc.unfreeze()
    assert keep
