"""`tlt train` on a user's task file across a Ray cluster of two nodes, against the same run on one.

The cluster is Ray's own test cluster (`ray.cluster_utils.Cluster`): a head and a second node,
each a raylet of its own with one CPU, all on this machine; the run's two rollout workers take a
CPU each, so one runs on each node. The workers get the weights through Ray's object store and
write them to their own temporary directories (real/run/shipping.py).

Both runs are small (1 RL step, 2 prompts x 4 samples, a 192-token cap, no SD), on a task file
with a reward function from a module the test writes (`module:function`). Smaller runs (2 x 2,
64 tokens) gave every response the same reward, so no update to compare.

What is compared: per response, its reward, its length and its finish reason exactly (the same
sampling seeds on the same engine; each worker runs one torch thread either way); the GRPO
update's loss within 1e-5 and the updated weights within 1e-6 (the update runs in the driver on
the same threads both times; the tolerances cover float reduction order, though none was seen).
"""

from __future__ import annotations

import sys

import pytest

from real.run.coordinator import RunConfig, run_training
from workbench.contracts.policy import load_policy
from workbench.contracts.task import TaskProblem, load_task, write_task_file
from workbench.contracts.trace import load_trace

pytestmark = [pytest.mark.needs_vllm, pytest.mark.needs_reference]

REWARD_MODULE = '''
def score(response, answer):
    """1 for a right final answer line, a tenth for any answer line."""
    lines = [l for l in response.splitlines() if l.startswith("A:")]
    if not lines:
        return 0.0
    return 1.0 if lines[0][2:].strip() == answer.strip() else 0.1
'''


@pytest.fixture(scope="module")
def user_task(tmp_path_factory):
    from real.tiny.task import make_problems

    root = tmp_path_factory.mktemp("task")
    (root / "team_rewards.py").write_text(REWARD_MODULE)
    sys.path.insert(0, str(root))
    path = root / "task.jsonl"
    # Problems of 8 to 12 subtraction lines (100-160 tokens): long enough that the reference model
    # gets some wrong, so a group's rewards differ and the update moves the weights.
    mid = [p for p in make_problems(200, seed=11, mix="hard") if 8 <= p.difficulty <= 12][:8]
    write_task_file(path, [TaskProblem(p.prompt, str(p.answer), p.solution) for p in mid])
    yield load_task(path, "team_rewards:score")
    sys.path.remove(str(root))


def _run(model, task, out, address=None):
    cfg = RunConfig(
        model=model,
        policy=load_policy("baseline"),
        out=out,
        steps=1,
        workers=2,
        seed=3,
        prompts=2,
        samples=4,
        max_tokens=192,
        task=task,
        address=address,
    )
    return run_training(cfg, log=None)


@pytest.fixture(scope="module")
def runs(user_task, tmp_path_factory, reference_model):
    import ray
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("multinode")
    if ray.is_initialized():
        ray.shutdown()
    # A local run gives each of its W workers cpu_count // W torch threads, a cluster's one each:
    # on a machine of more than 2 cores the single-node run would sample on other threads.
    mp = pytest.MonkeyPatch()
    mp.setattr("os.cpu_count", lambda: 2)
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        nodes = [n for n in ray.nodes() if n["Alive"]]
        multi = _run(reference_model, user_task, root / "two-nodes", address=cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()
    try:
        single = _run(reference_model, user_task, root / "one-node")
    finally:
        ray.shutdown()
        mp.undo()
    return {"nodes": nodes, "multi": multi, "single": single}


def _responses(run):
    req = load_trace(run.out / "trace").requests.sort_values(["rl_step", "prompt_id", "sample"])
    return req[["prompt_id", "sample", "response_tokens", "finish_reason", "reward"]].to_dict(
        "records"
    )


def test_the_run_spans_two_nodes_and_its_workers_load_weights_from_the_object_store(runs):
    assert len(runs["nodes"]) == 2 and all(n["Resources"].get("CPU") == 1 for n in runs["nodes"])
    assert runs["multi"].outputs.settings["weights_from"].startswith("Ray object store")
    assert runs["single"].outputs.settings["weights_from"] == "the coordinator's disk"


def test_a_user_task_with_a_module_function_reward_trains_one_step(runs, user_task):
    run = runs["single"]
    assert len(run.metrics) == 1 and (run.out / "checkpoints").is_dir()
    meta = load_trace(run.out / "trace").meta
    assert meta["task"] == user_task.name and meta["reward"] == "team_rewards:score"
    rewards = {r["reward"] for r in _responses(run)}
    assert rewards <= {0.0, 0.1, 1.0} and len(_responses(run)) == 8


def test_two_nodes_give_the_single_node_run(runs):
    multi, single = runs["multi"], runs["single"]
    assert _responses(multi) == _responses(single)
    m, s = multi.metrics[0], single.metrics[0]
    assert m.tokens == s.tokens and m.longest == s.longest and m.reward == s.reward
    assert m.grpo_loss == pytest.approx(s.grpo_loss, abs=1e-5)
    # The updated weights both runs synced to their workers.
    from safetensors.torch import load_file

    a, b = (load_file(str(r.model_dir / "model.safetensors")) for r in (multi, single))
    start = load_file(str(multi.cfg.model / "model.safetensors"))
    assert a.keys() == b.keys()
    apart = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert apart <= 1e-6
    # Not vacuous: the step's groups had rewards apart, so the update moved the weights.
    moved = max(float((a[k] - start[k].float()).abs().max()) for k in a)
    print(
        f"[multinode] rewards {[r['reward'] for r in _responses(single)]}, loss {s.grpo_loss:.6g} "
        f"vs {m.grpo_loss:.6g}, weights moved by up to {moved:.3g}, the two runs' weights "
        f"{apart:.3g} apart"
    )
    assert moved > 1e-7
