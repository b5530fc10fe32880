"""A run's shape: from the log's launch command where it has one, else from the resolved config
the log printed at start, from flags where neither says.

A flag overrides the log; what neither gives is refused, naming the flag. The GPU type is never in
a veRL log: `--gpu` picks it (the calibration's decode-speed factor absorbs a wrong or missing one).
Two engine settings have veRL's defaults when the command leaves them out, said as such:
`rollout.name` (vllm) and `rollout.max_num_seqs` (1024).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.simulator import MAX_WORK
from workbench.contracts.architecture import PRESET_DIR as ARCH_DIR
from workbench.contracts.schema import ConfigError
from workbench.runlog.printed_config import ConfigValue
from workbench.runlog.reader import RunLog

MODEL_KEY = "actor_rollout_ref.model.path"
ROLLOUT = "actor_rollout_ref.rollout."
MAX_CAP = 1 << 20  # a Workload's max_response_tokens is at most this
VERL_MAX_NUM_SEQS = 1024  # veRL's ppo_trainer.yaml default for rollout.max_num_seqs
FRAMEWORKS = ("vllm", "sglang")
TUNED_SUFFIXES = ("-instruct", "-it")


@dataclass(frozen=True)
class ShapeFlags:
    """What the user passed (None: not given)."""

    arch: str | None = None
    gpu: str | None = None
    gpus: int | None = None
    tp: int | None = None
    prompts_per_step: int | None = None
    group_size: int | None = None
    max_response_tokens: int | None = None
    max_batch: int | None = None
    framework: str | None = None
    ep: int | None = None  # a mixture of experts' expert parallelism (None: the engine's default)


@dataclass(frozen=True)
class Taken:
    """One shape field and where it came from."""

    field: str
    value: str
    source: str


# Settings said with the shape where the log gives them, beyond what the baseline rollout runs:
# speculative decoding's (its depth, top-k and tokens verified: they invert the log's accepted
# length, workbench/runlog/sd_acceptance.py) and an asynchronous run's bound on off-policy steps
NOTED = (("sd_algorithm", "sd.algorithm"), ("sd_depth", "sd.num_steps"), ("sd_topk", "sd.topk"),
         ("sd_verify_tokens", "sd.num_draft_tokens"),
         ("max_head_offpolicyness", "async.max_head_offpolicyness"))


@dataclass(frozen=True)
class RunShape:
    arch: str  # an architecture preset name or a config.json path
    gpu: str
    gpus: int
    tp: int
    prompts_per_step: int
    group_size: int
    max_response_tokens: int
    framework: str
    max_batch: int
    taken: tuple[Taken, ...]
    ep: int | None = None  # expert parallelism of a MoE model's engines (None: the default)

    @property
    def engines(self) -> int:
        return self.gpus // self.tp

    def said(self, field: str) -> Taken | None:
        """A field as the shape took it (NOTED's among them), None where nothing gave it."""
        return next((t for t in self.taken if t.field == field), None)

    @property
    def responses(self) -> int:
        return self.prompts_per_step * self.group_size


def _int(where: str, key: str, text: str, flag: str) -> int:
    try:
        v = int(float(text))
    except (ValueError, OverflowError):  # not a number; an infinite one
        raise ConfigError(where, key, text, f"a whole number >= 1 (or pass {flag})") from None
    if v < 1 or v != float(text):
        raise ConfigError(where, key, text, f"a whole number >= 1 (or pass {flag})")
    return v


def setting(log: RunLog, key: str, flag: str = "") -> Taken | None:
    """The log's setting of `key`: the launch command's override, else the printed config (None:
    neither; `field` is the key). A command's value naming a variable the log never assigns is
    refused (pass `flag`)."""
    s = log.command.get(key)
    if s is None:
        printed = log.config.get(key)
        if printed is None or printed.value is None:
            return None
        return Taken(key, str(printed.value), printed_source(key, printed))
    if s.unresolved:
        raise ConfigError(
            f"{log.path}:{s.line}",
            key,
            s.written,
            f"a value: the log never assigns ${s.unresolved}"
            + (f"; pass {flag}" if flag else ""),
        )
    return Taken(key, s.value, f"log: {s.where()}")


def _from_log(
    log: RunLog, key: str, flag: str, taken: list[Taken], field: str, given: object
) -> str | None:
    """The flag's value, else the log's setting of `key` (None: neither)."""
    if given is not None:
        taken.append(Taken(field, str(given), f"flag {flag}"))
        return str(given)
    found = setting(log, key, flag)
    if found is None:
        return None
    taken.append(Taken(field, found.value, found.source))
    return found.value


def printed_source(key: str, printed: ConfigValue) -> str:
    """Where a printed setting came from: its name in the log (another framework's, where it
    differs from veRL's key) and line; line 0 is a fact of the framework, or its default."""
    name = printed.name or key
    if not printed.line:
        return name[1:-1] if name.startswith("(") and name.endswith(")") else name
    return f"log's printed config: {name}, line {printed.line}"


def _log_name(log: RunLog, key: str) -> str:
    """A setting as the log names it (another framework's name where the log is not veRL's)."""
    printed = log.config.get(key)
    return printed.name if log.command.get(key) is None and printed and printed.name else key


def _need(value: str | None, log: RunLog, key: str, flag: str) -> str:
    if value is None:
        what = (
            f"the log's launch command does not set {key}"
            if log.command.settings
            else "the log has no launch command"
        )
        raise ConfigError(log.path, key, "<missing>", f"{what}: pass {flag}")
    return value


def resolve_arch(name: str) -> str:
    """A model path as veRL names it (`org/name`, a local directory) or a flag's value, as an
    architecture preset or a config.json: the preset named as the path's last part (lowercase; an
    instruction-tuned checkpoint, `-instruct` or `-it`, has its base's shape), a config.json in a
    local directory, or the file itself."""
    p = Path(name)
    if p.is_file():
        return str(p)
    if (p / "config.json").is_file():
        return str(p / "config.json")
    stem = p.name.lower()
    for candidate in (stem, *(stem[: -len(s)] for s in TUNED_SUFFIXES if stem.endswith(s))):
        if (ARCH_DIR / f"{candidate}.json").is_file():
            return candidate
    raise ConfigError(
        "--arch",
        "arch",
        name,
        "an architecture preset ("
        + ", ".join(sorted(f.stem for f in ARCH_DIR.glob("*.json")))
        + ") or a Hugging Face config.json",
    )


def _gpus(log: RunLog, flags: ShapeFlags, taken: list[Taken]) -> int:
    if flags.gpus is not None:
        taken.append(Taken("gpus", str(flags.gpus), "flag --gpus"))
        return flags.gpus
    keys = ("trainer.n_gpus_per_node", "trainer.nnodes")
    per = _need(_from_log(log, keys[0], "--gpus", [], "", None), log, keys[0], "--gpus")
    nodes = _from_log(log, keys[1], "--gpus", [], "", None)
    node_name = _log_name(log, keys[1])
    said = (node_name[1:-1] if node_name.startswith("(") else f"{node_name}={nodes}"
            ) if nodes is not None else f"{keys[1]} 1 (veRL's default)"
    gpus = _int(log.path, keys[0], per, "--gpus") * _int(log.path, keys[1], nodes or "1", "--gpus")
    taken.append(Taken("gpus", str(gpus), f"log: {_log_name(log, keys[0])}={per} x {said}"))
    return gpus


def _default(log: RunLog, key: str) -> str:
    """veRL's default, said as such; where another framework wrote the log, said as assumed."""
    if log.framework.name == "veRL":
        return f"veRL's default ({key})"
    return f"not in the {log.framework.name} log: veRL's default ({key}) assumed"


def _engine(log: RunLog, flags: ShapeFlags, taken: list[Taken]) -> tuple[str, int]:
    """The rollout engine and its batch cap: the log's, else veRL's defaults (said as such)."""
    framework = _from_log(log, ROLLOUT + "name", "--framework", taken, "framework", flags.framework)
    if framework is None:
        framework = "vllm"
        taken.append(Taken("framework", framework, _default(log, "rollout.name")))
    if framework not in FRAMEWORKS:
        raise ConfigError(log.path, ROLLOUT + "name", framework,
                          "vllm or sglang (the engines the measured database has)")
    key = ROLLOUT + "max_num_seqs"
    batch = _from_log(log, key, "--max-batch", taken, "max_batch", flags.max_batch)
    if batch is None:
        batch = str(VERL_MAX_NUM_SEQS)
        taken.append(Taken("max_batch", batch, _default(log, "rollout.max_num_seqs")))
    return framework, _int(log.path, key, batch, "--max-batch")


INT_FIELDS = (("tp", ROLLOUT + "tensor_model_parallel_size", "--tp"),
              ("prompts_per_step", "data.train_batch_size", "--prompts-per-step"),
              ("group_size", ROLLOUT + "n", "--group-size"),
              ("max_response_tokens", "data.max_response_length", "--max-response-tokens"))


def _check_size(log: RunLog, gpus: int, ints: dict[str, int]) -> None:
    """A shape the simulator can take (a number read as 1e26 is refused here, not by memory)."""
    responses = ints["prompts_per_step"] * ints["group_size"]
    if responses + gpus > MAX_WORK:
        raise ConfigError(f"{log.path} with the flags given", "prompts_per_step x group_size, gpus",
                          f"{responses:,} responses, {gpus:,} GPUs",
                          f"at most {MAX_WORK:,} responses and GPUs a step (the simulator's limit, "
                          "docs/formats.md#limits): check data.train_batch_size, rollout.n and "
                          "the GPUs, or pass --prompts-per-step, --group-size, --gpus")
    if ints["max_response_tokens"] > MAX_CAP:
        raise ConfigError(log.path, "max_response_tokens", ints["max_response_tokens"],
                          f"at most {MAX_CAP:,} tokens (a workload's cap); or pass "
                          "--max-response-tokens")


def run_shape(log: RunLog, flags: ShapeFlags) -> RunShape:
    """The shape, each field from a flag or the log (module docstring)."""
    taken: list[Taken] = []
    arch_name = _from_log(log, MODEL_KEY, "--arch", taken, "model", flags.arch)
    arch_name = _need(arch_name, log, MODEL_KEY, "--arch")
    try:
        arch = resolve_arch(arch_name)
    except ConfigError as exc:
        if flags.arch is not None:
            raise
        said = log.command.get(MODEL_KEY) or log.config.get(MODEL_KEY)  # the log named it: where
        raise ConfigError(f"{log.path}:{said.line}", _log_name(log, MODEL_KEY), arch_name,
                          f"{exc.allowed}; or pass --arch") from None
    if flags.gpu is None:
        raise ConfigError(log.path, "gpu", "<not in a veRL log>",
                          "pass --gpu (the GPU type the run used: the measured database's costs "
                          "and the calibration's decode-speed prior are that GPU's)")
    taken.append(Taken("gpu", flags.gpu, "flag --gpu"))
    gpus = _gpus(log, flags, taken)
    ints = {}
    for field, key, flag in INT_FIELDS:
        given = getattr(flags, field)
        value = _from_log(log, key, flag, taken, field, given)
        if value is None and field == "group_size" and any(
                k.startswith(ROLLOUT) for k, _ in log.config.values):
            value = "1"  # the printed rollout section is whole: a veRL before rollout.n
            taken.append(Taken(field, value, "the log's printed rollout config has no n (a veRL "
                               "before rollout.n: one response per prompt)"))
        value = _need(value, log, key, flag)
        ints[field] = _int(log.path if given is None else flag, key, value, flag)
    _check_size(log, gpus, ints)
    if gpus % ints["tp"]:
        raise ConfigError(f"{log.path} with the flags given", "tp", ints["tp"],
                          f"a TP degree that divides the run's {gpus} GPUs (check --tp and --gpus)")
    framework, batch = _engine(log, flags, taken)
    if flags.ep is not None:
        taken.append(Taken("ep", str(flags.ep), "flag --ep"))
    for field, key in NOTED:
        _from_log(log, key, "", taken, field, None)
    return RunShape(arch, flags.gpu, gpus, ints["tp"], ints["prompts_per_step"], ints["group_size"],
                    ints["max_response_tokens"], framework, batch, tuple(taken), flags.ep)
