"""The batches an engine sweep adds to straddle an engine's CUDA-graph limit (real/sweep/graphs.py):
vLLM keys graphs on a step's tokens, so a verify of K drafts leaves its graphs K + 1 times sooner
than a plain step."""

from real.sweep.graphs import edge_batches, graph_rows, largest_batch


def test_each_draft_length_is_timed_just_inside_and_just_outside_its_graphs():
    assert largest_batch(512, 0) == 512 and largest_batch(512, 3) == 128
    assert largest_batch(512, 7) == 64 and largest_batch(None, 3) == 0
    assert edge_batches(512, (3, 7), 1024) == [64, 65, 128, 129, 512, 513]
    assert edge_batches(512, (3,), 256) == [128, 129]  # plain's 512 is above max_num_seqs


def test_a_cell_says_whether_its_verify_replays_a_graph():
    rows = graph_rows({"max_tokens": 512, "sizes": [8, 512]}, (128, 129), (3,))
    graph = {(r["batch"], r["k"]): r["graph"] for r in rows}
    assert graph == {(128, 0): True, (128, 3): True, (129, 0): True, (129, 3): False}
    assert not any(r["graph"] for r in graph_rows({"max_tokens": None}, (1,), (1,)))
