"""ReVISE's stage trainer: which rows each step sees (the reference pass covers exactly these)."""

from __future__ import annotations

from veriloop.training.revise import step_batches


def test_steps_walk_one_shuffle_without_repeats_until_it_wraps() -> None:
    batches = step_batches(count=10, steps=3, batch_size=3, seed=0)
    flat = [index for batch in batches for index in batch]
    assert [len(batch) for batch in batches] == [3, 3, 3]
    assert len(set(flat)) == 9  # nine distinct rows before the walk wraps
    assert step_batches(count=10, steps=3, batch_size=3, seed=0) == batches  # seeded


def test_few_steps_visit_few_rows_and_many_steps_visit_all() -> None:
    assert len({i for batch in step_batches(130, 6, 4, seed=1) for i in batch}) == 24
    assert {i for batch in step_batches(7, 5, 4, seed=1) for i in batch} == set(range(7))


def test_a_batch_larger_than_the_rows_takes_each_row_once() -> None:
    assert [sorted(batch) for batch in step_batches(3, 2, 8, seed=0)] == [[0, 1, 2], [0, 1, 2]]
