"""Orrery from Python: load a model, describe a cluster, simulate a strategy,
search for the best plan, export it to a framework, write its report.

Every call runs the same C++ code as the ``orrery`` command of the same name,
so a plan made here is byte for byte the JSON ``orrery plan --json`` prints
for the same inputs, and an error is :class:`Error` carrying the line the
command would print. The GIL is released while a model is imported, a step
simulated or a plan searched. docs/python.md walks through it.

>>> import orrery
>>> model = orrery.load("gpt3-1.3b")                    # a built-in model
>>> cluster = orrery.Cluster.preset("2x8xA100-80G")
>>> plan = orrery.plan(model, cluster, global_batch=512)
>>> plan.strategy["cli"], plan.step_time_s               # doctest: +SKIP
"""

from __future__ import annotations

import json as _json
import os as _os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import _core

__all__ = [
    "Error",
    "Model",
    "Cluster",
    "Simulation",
    "Plan",
    "load",
    "simulate",
    "plan",
    "from_torch",
    "assumption_keywords",
    "EXPORT_FORMATS",
]

__version__ = "0.1.0"

#: Raised for every user error, with the one line ``orrery`` prints.
Error = _core.Error
Error.__module__ = "orrery"

#: What :meth:`Plan.export` writes (``orrery export --to``).
EXPORT_FORMATS = ("megatron", "deepspeed", "torchtitan", "pytorch", "jax")

_MODELS_DIR = _os.path.join(_os.path.dirname(__file__), "models")
if _os.path.isdir(_MODELS_DIR):
    _core.set_builtin_models_dir(_MODELS_DIR)


def _dim_bindings(dims: Optional[Mapping[str, int]]) -> List[str]:
    out = []
    for name, value in (dims or {}).items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise Error(f"--dim '{name}={value}': value must be a positive integer")
        out.append(f"{name}={value}")
    return out


class Model:
    """An imported, outlined model (``orrery stats`` describes it).

    Made by :func:`load` or :func:`from_torch`. ``stats`` is the dict
    ``orrery stats --json`` prints; the properties below read it.
    """

    def __init__(self, handle: Any, name: str, dims: Dict[str, int]):
        self._handle = handle
        self.name = name
        self.dims = dict(dims)
        self._stats: Optional[Dict[str, Any]] = None

    @property
    def kernels(self) -> str:
        """The kernels it was imported for: fused, unfused-attention, eager, sdpa, compiled."""
        return self._handle.kernels

    @property
    def stats(self) -> Dict[str, Any]:
        """``orrery stats --json`` of the model (per sample: batch 1)."""
        if self._stats is None:
            self._stats = _json.loads(_core.stats(self._handle, True))
        return self._stats

    def stats_table(self) -> str:
        """``orrery stats`` as the command prints it."""
        return _core.stats(self._handle, False)

    @property
    def parameters(self) -> int:
        """Trainable parameters (tied weights counted once)."""
        return int(self.stats["parameters"])

    @property
    def forward_flops_per_sample(self) -> float:
        return float(self.stats["forward_flops_per_sample"])

    @property
    def training_flops_per_sample(self) -> float:
        return float(self.stats["training_flops_per_sample"])

    @property
    def tokens_per_sample(self) -> int:
        return int(self.stats["tokens_per_sample"])

    @property
    def layers(self) -> List[Dict[str, Any]]:
        """The layer kinds in order, each with its count and costs."""
        return list(self.stats["layers"])

    def __repr__(self) -> str:
        s = self.stats
        kinds = ", ".join(f"{l['kind']} x{l['count']}" for l in s["layers"])
        return (f"<orrery.Model {self.name!r}: {s['parameters']:,} parameters, "
                f"{s['training_flops_per_sample']:.4g} training FLOPs per sample; {kinds}>")


def load(source: Union[str, bytes, bytearray, "_os.PathLike[str]"],
         dims: Optional[Mapping[str, int]] = None, *, kernels: str = "fused",
         name: Optional[str] = None) -> Model:
    """Imports a model: an ONNX file, a built-in model's name
    (``gpt3-1.3b``, ``llama3-8b``, ... as ``orrery plan`` takes them) or the
    ONNX bytes themselves.

    ``dims`` binds symbolic dimensions (``{"seq": 4096}``); ``batch``
    defaults to 1, a plan's micro-batch comes from its strategy.
    ``kernels`` is what the framework runs: ``fused`` (Megatron-Core with
    Transformer Engine and flash attention), ``unfused-attention``,
    ``eager`` (plain PyTorch, one kernel per op), ``sdpa`` (plain PyTorch
    with scaled_dot_product_attention: torchtitan without torch.compile) or
    ``compiled`` (the same under torch.compile: torchtitan's compile = true).
    ``name`` names bytes in
    messages and in plans (default ``<bytes>``).
    """
    if not isinstance(source, (str, bytes, bytearray, memoryview, _os.PathLike)):
        raise TypeError(f"source: expected a built-in model's name, an ONNX "
                        f"file's path or ONNX bytes, not {type(source).__name__}")
    if dims is not None and not isinstance(dims, Mapping):
        raise TypeError(f"dims: expected a dict of dim names to integers, not "
                        f"{type(dims).__name__}")
    bindings = _dim_bindings(dims)
    if isinstance(source, (bytes, bytearray, memoryview)):
        label = name or "<bytes>"
        handle = _core.load(label, bytes(source), bindings, kernels)
    else:
        label = _os.fspath(source)
        handle = _core.load(label, None, bindings, kernels)
    return Model(handle, label, dict(dims or {}))


class Cluster:
    """A cluster: a preset (``8xA100-80G``, ``4x8xH100-SXM``), a cluster
    JSON file, or cluster JSON in memory (docs/cluster.md)."""

    def __init__(self, spec: str, json_text: Optional[str] = None):
        if not isinstance(spec, str):
            raise TypeError(f"spec: expected a preset such as '8xA100-80G' or a "
                            f"cluster JSON file's path, not {type(spec).__name__}")
        if json_text is not None and not isinstance(json_text, str):
            raise TypeError(f"json_text: expected cluster JSON text, not "
                            f"{type(json_text).__name__}")
        self.spec = spec
        self._json = json_text
        self._info = _json.loads(_core.describe_cluster(spec, json_text))

    @classmethod
    def preset(cls, name: str) -> "Cluster":
        """A preset: NODESxGPUSxTYPE or GPUSxTYPE."""
        return cls(name)

    @classmethod
    def load(cls, path: Union[str, "_os.PathLike[str]"]) -> "Cluster":
        """A cluster JSON file; plans record its path, as the CLI's do."""
        return cls(_os.fspath(path))

    @classmethod
    def from_json(cls, spec: Union[str, Mapping[str, Any]],
                  name: str = "<json>") -> "Cluster":
        """Cluster JSON given as text or as a dict; ``name`` is what plans
        record as ``cluster.spec`` (``orrery check`` then needs
        ``--cluster``)."""
        if not isinstance(spec, (str, Mapping)):
            raise TypeError(f"spec: expected cluster JSON text or a dict, not "
                            f"{type(spec).__name__}")
        text = spec if isinstance(spec, str) else _json.dumps(spec)
        return cls(name, text)

    @property
    def name(self) -> str:
        return self._info["name"]

    @property
    def num_devices(self) -> int:
        return int(self._info["devices"])

    @property
    def num_nodes(self) -> int:
        return int(self._info["nodes"])

    @property
    def device_types(self) -> List[str]:
        return list(self._info["device_types"])

    @property
    def homogeneous(self) -> bool:
        """One device type at one site (else plans are heterogeneous)."""
        return bool(self._info["homogeneous"])

    def __repr__(self) -> str:
        return (f"<orrery.Cluster {self.spec!r}: {self.num_devices} devices on "
                f"{self.num_nodes} nodes ({', '.join(self.device_types)})>")


#: What a function taking a model takes: a loaded :class:`Model`, a
#: built-in model's name, an ONNX file's path, or ONNX bytes.
ModelLike = Union[Model, str, bytes, bytearray, memoryview, "_os.PathLike[str]"]
#: What a function taking a cluster takes: a :class:`Cluster`, a preset
#: (``8xA100-80G``), a cluster JSON file's path, or cluster JSON as a dict.
ClusterLike = Union[Cluster, str, Mapping[str, Any], "_os.PathLike[str]"]


def _as_model(value: Any, argument: str) -> Model:
    """``value`` as a Model, loaded as :func:`load` loads it."""
    if isinstance(value, Model):
        return value
    if isinstance(value, (str, bytes, bytearray, memoryview, _os.PathLike)):
        return load(value)
    raise TypeError(f"{argument}: expected an orrery.Model, a built-in model's "
                    f"name, an ONNX file's path or ONNX bytes, not "
                    f"{type(value).__name__}")


def _as_cluster(value: Any, argument: str) -> Cluster:
    """``value`` as a Cluster: a preset or a file's path, or cluster JSON."""
    if isinstance(value, Cluster):
        return value
    if isinstance(value, (str, _os.PathLike)):
        return Cluster(_os.fspath(value))
    if isinstance(value, Mapping):
        return Cluster.from_json(value)
    raise TypeError(f"{argument}: expected an orrery.Cluster, a preset such as "
                    f"'8xA100-80G', a cluster JSON file's path or a dict, not "
                    f"{type(value).__name__}")


def assumption_keywords() -> List[str]:
    """The framework assumptions :func:`simulate` and :func:`plan` take as
    keywords, the flags of ``orrery simulate`` and ``orrery plan`` of the
    same names (``grad_bytes`` is ``--grad-bytes``): one table in the C++
    core names them for plans, flags and keywords alike."""
    return list(_core.assumption_keywords())


def _framework_kwargs(freeze: Optional[Iterable[str]], lora: Optional[str],
                      layer_profile: Optional[str],
                      assumptions: Mapping[str, Any]) -> Dict[str, Any]:
    kw: Dict[str, Any] = dict(assumptions)
    kw["freeze"] = None if freeze is None else \
        [str(f) for f in ([freeze] if isinstance(freeze, str) else freeze)]
    kw["lora"] = lora
    kw["layer_profile"] = None if layer_profile is None else str(layer_profile)
    return kw


def _strategy_text(strategy: Union[str, Mapping[str, Any]]) -> str:
    if isinstance(strategy, str):
        return strategy
    if not isinstance(strategy, Mapping):
        raise TypeError(f"strategy: expected a string such as "
                        f"'tp=8,pp=2,mbs=1' or a dict of the same keys, not "
                        f"{type(strategy).__name__}")
    return ",".join(f"{k}={v}" for k, v in strategy.items())


class _JsonView:
    """A JSON document whose top-level fields read as attributes."""

    def __init__(self, text: str):
        self._text = text
        self.data: Dict[str, Any] = _json.loads(text)

    def __getattr__(self, field: str) -> Any:
        data = self.__dict__.get("data")
        if data is not None and field in data:
            return data[field]
        raise AttributeError(field)

    def __getitem__(self, field: str) -> Any:
        return self.data[field]

    def __contains__(self, field: str) -> bool:
        return field in self.data

    def keys(self):
        return self.data.keys()

    def to_json(self) -> str:
        """The JSON text exactly as the command writes it."""
        return self._text


class Simulation(_JsonView):
    """What ``orrery simulate --json`` prints: the step's figures
    (``step_time_s``, ``mfu``, ``peak_memory_bytes``, ...), ``breakdown_s``,
    ``stages`` and ``layers``, as attributes or items (a heterogeneous
    plan's under ``predicted``)."""

    @property
    def step_time_s(self) -> float:
        if "step_time_s" in self.data:
            return float(self.data["step_time_s"])
        return float(self.data["predicted"]["step_time_s"])

    @property
    def fits(self) -> bool:
        return bool(self.data.get("fits", True))

    def __repr__(self) -> str:
        return f"<orrery.Simulation step {self.step_time_s:.4g} s, fits={self.fits}>"


def _goodput(tokens, days, checkpoint, checkpoint_every, seed, trials) -> dict:
    """The goodput keywords, typed for the core (it checks their values)."""
    def number(name, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{name}: expected a number, not {type(v).__name__}")
        return float(v)

    def integer(name, v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: expected an integer, not {type(v).__name__}")
        if v < 0 or v >= 2**63:
            raise Error(f"{name} {v}: expected a non-negative integer")
        return v

    if not isinstance(checkpoint, str):
        raise TypeError(f"checkpoint: expected 'sync' or 'async', not {type(checkpoint).__name__}")
    return {"tokens": 0.0 if tokens is None else number("tokens", tokens),
            "days": 0.0 if days is None else number("days", days),
            "checkpoint": checkpoint,
            "checkpoint_every": integer("checkpoint_every", checkpoint_every),
            "seed": integer("seed", seed),
            "trials": min(integer("trials", trials), 2**31 - 1)}


def simulate(model: ModelLike, cluster: ClusterLike,
             strategy: Union[str, Mapping[str, Any], None] = None, *,
             plan: Optional["Plan"] = None, trace: Optional[str] = None,
             use_measured_kernels: bool = True,
             freeze: Optional[Iterable[str]] = None,
             lora: Optional[str] = None,
             layer_profile: Optional[str] = None,
             tokens: Optional[float] = None, days: Optional[float] = None,
             checkpoint: str = "sync", checkpoint_every: int = 0,
             seed: int = 1, trials: int = 100,
             **assumptions: Any) -> Simulation:
    """Prices one training step of ``strategy`` (``"tp=8,pp=2,mbs=1,gbs=512"``
    or a dict of the same keys, docs/strategy.md) on ``cluster``, or of a
    plan's strategy (``plan=``, heterogeneous plans too), without hardware.
    ``trace`` writes a Chrome-trace timeline there. The keywords after it
    are the flags of ``orrery simulate`` of the same names; the framework
    assumptions among them are :func:`assumption_keywords`. ``model`` and
    ``cluster`` take what :func:`load` and :class:`Cluster` take too.
    ``tokens``, ``days`` and the keywords after them price the run's goodput
    (docs/reliability.md): the result's ``goodput``."""
    model = _as_model(model, "model")
    cluster = _as_cluster(cluster, "cluster")
    good = _goodput(tokens, days, checkpoint, checkpoint_every, seed, trials)
    if (strategy is None) == (plan is None):
        raise Error("simulate: give a strategy or a plan (one of them)")
    if plan is not None and not isinstance(plan, Plan):
        raise TypeError(f"plan: expected an orrery.Plan (Plan.load reads a "
                        f"file), not {type(plan).__name__}")
    fw = _framework_kwargs(freeze, lora, layer_profile, assumptions)
    text = _core.simulate(model._handle, cluster.spec, cluster._json,
                          "" if strategy is None else _strategy_text(strategy),
                          None if plan is None else plan.to_json(),
                          use_measured_kernels, True, trace or "", fw, good)
    return Simulation(text)


class Plan(_JsonView):
    """A plan: the fields of the plan JSON (``strategy``, ``predicted``,
    ``stages``, ``alternatives``, ...; docs/plan.md) as attributes or
    items, the JSON text itself (:meth:`to_json`), the summary the command
    prints (:attr:`summary`), and :meth:`export` / :meth:`report`."""

    def __init__(self, text: str, summary: str, model: Model, cluster: Cluster):
        super().__init__(text)
        self.summary = summary
        self._model = model
        self._cluster = cluster

    @property
    def step_time_s(self) -> float:
        return float(self.data["predicted"]["step_time_s"])

    @property
    def runners_up(self) -> List[Dict[str, Any]]:
        """The next best plans, as the JSON's ``alternatives``."""
        return list(self.data.get("alternatives", []))

    def export(self, to: str) -> str:
        """The plan in a framework's own format, as ``orrery export --to``
        writes it (megatron, deepspeed, torchtitan, pytorch, jax); a target
        that cannot run the plan raises :class:`Error` saying why."""
        return _core.export_plan(self._text, to)

    def report(self, path: Union[str, "_os.PathLike[str]"],
               measured: Optional[str] = None) -> str:
        """Checks the plan against its model and cluster and writes the HTML
        report (``orrery report``); ``measured``: an ``orrery run --json``
        file to draw beside the prediction. Returns the path."""
        out = _os.fspath(path)
        _core.report(self._model._handle, self._text, self._cluster.spec,
                     self._cluster._json, out, measured or "")
        return out

    @classmethod
    def load(cls, path: Union[str, "_os.PathLike[str]"], model: Optional[ModelLike] = None,
             cluster: Optional[ClusterLike] = None) -> "Plan":
        """A plan file (``orrery plan -o``, :meth:`save`) with the model and
        cluster it names, loaded as ``orrery check`` loads them (its
        ``model.source`` at its ``model.dims`` for its kernels, its
        ``cluster.spec``), or the ``model`` and ``cluster`` given. The file
        is checked in full (field types, the model's and cluster's digests)
        when it is simulated, exported or reported."""
        if not isinstance(path, (str, _os.PathLike)):
            raise TypeError(f"path: expected a plan file's path, not {type(path).__name__}")
        where = _os.fspath(path)
        model = None if model is None else _as_model(model, "model")
        cluster = None if cluster is None else _as_cluster(cluster, "cluster")
        try:
            with open(where, encoding="utf-8") as f:
                text = f.read()
            data = _json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise Error(f"{where}: {e}") from None
        if not isinstance(data, dict):
            raise Error(f"{where}: expected a JSON object")
        if cluster is None:
            spec = data.get("cluster", {}).get("spec") if isinstance(data.get("cluster"), dict) else None
            if not isinstance(spec, str):
                raise Error(f"{where}: cluster.spec: missing")
            cluster = Cluster(spec)
        if model is None:
            m = data.get("model")
            source = m.get("source") if isinstance(m, dict) else None
            if not isinstance(source, str):
                raise Error(f"{where}: model.source: missing")
            dims = m.get("dims", {})
            if not isinstance(dims, dict):
                raise Error(f"{where}: model.dims: expected an object")
            predicted = data.get("predicted")
            kernels = predicted.get("kernels", "fused") if isinstance(predicted, dict) else "fused"
            model = load(source, dims, kernels=kernels if isinstance(kernels, str) else "fused")
        return cls(text, "", model, cluster)

    def save(self, path: Union[str, "_os.PathLike[str]"]) -> None:
        """Writes the JSON (what ``orrery plan -o FILE`` writes)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self._text)

    def __repr__(self) -> str:
        cli = self.data.get("strategy", {}).get("cli") or self.data.get("strategy", {}).get("summary", "")
        return f"<orrery.Plan {cli} step {self.step_time_s:.4g} s>"


def plan(model: ModelLike, cluster: ClusterLike, global_batch: int = 1024, *,
         objective: str = "time", top: int = 5, budget: Optional[float] = None,
         precision: Optional[str] = None, framework: Optional[str] = None,
         strategy: Union[str, Mapping[str, Any], None] = None,
         explain: bool = False, rank_by: str = "step",
         freeze: Optional[Iterable[str]] = None,
         lora: Optional[str] = None,
         layer_profile: Optional[str] = None,
         tokens: Optional[float] = None, days: Optional[float] = None,
         checkpoint: str = "sync", checkpoint_every: int = 0,
         seed: int = 1, trials: int = 100,
         **assumptions: Any) -> Plan:
    """Searches for the fastest (``objective="time"``), cheapest (``cost``)
    or least-energy (``energy``) plan that fits, as ``orrery plan`` does;
    ``top`` plans are kept (the best first, the rest ``runners_up``).
    ``budget`` (USD per hour) uses as many nodes as it buys; ``framework``
    searches only what that framework runs; ``strategy`` prices one
    strategy instead of searching; ``rank_by`` (``"step"``, ``"p50"`` or
    ``"p90"``) orders the plans by the simulated step or a quantile of its
    uncertainty band (``predicted.step_time_band_s``). The rest are
    ``orrery plan``'s flags of the same names; the framework assumptions
    among them are :func:`assumption_keywords`. ``model`` and ``cluster``
    take what :func:`load` and :class:`Cluster` take too. ``tokens``,
    ``days`` and the keywords after them price the best plan's goodput
    (the plan's ``goodput``; ``objective="time-to-train"`` ranks by it:
    docs/reliability.md)."""
    model = _as_model(model, "model")
    cluster = _as_cluster(cluster, "cluster")
    fw = _framework_kwargs(freeze, lora, layer_profile, assumptions)
    good = _goodput(tokens, days, checkpoint, checkpoint_every, seed, trials)
    if isinstance(global_batch, bool) or not isinstance(global_batch, int):
        raise TypeError(f"global_batch: expected an integer, not "
                        f"{type(global_batch).__name__}")
    text, summary = _core.plan(
        model._handle, cluster.spec, cluster._json, global_batch, objective,
        0.0 if budget is None else float(budget), int(top), precision or "",
        framework or "any", "" if strategy is None else _strategy_text(strategy),
        explain, rank_by, fw, good)
    return Plan(text, summary, model, cluster)


def from_torch(module: Any, example_inputs: Union[Any, Sequence[Any]], *,
               dynamic_shapes: Optional[Mapping[str, Mapping[int, str]]] = None,
               dims: Optional[Mapping[str, int]] = None,
               input_names: Optional[Sequence[str]] = None,
               kernels: str = "fused", opset: int = 17,
               name: Optional[str] = None) -> Model:
    """Exports a ``torch.nn.Module`` to ONNX in memory with
    ``torch.onnx.export`` (no weights are written: the graph and shapes are
    all Orrery reads) and loads it.

    ``example_inputs``: a tensor or a tuple of them, as the module's
    forward takes them. ``dynamic_shapes`` names symbolic axes per input,
    ``{"input_ids": {0: "batch", 1: "seq"}}`` (the exporter's
    ``dynamic_axes``); ``dims`` binds them for planning (``{"seq": 2048}``;
    batch defaults to 1). ``input_names`` names the inputs (default
    ``input_0``, ``input_1``, ... or the keys of ``dynamic_shapes`` in order).
    The module is exported in training mode (dropout and batch norm as
    training runs them) and given back in the mode it was in.
    """
    try:
        import torch  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise Error("from_torch: PyTorch is not installed (pip install torch)") from e
    import tempfile
    import warnings

    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    names = list(input_names) if input_names is not None else (
        list(dynamic_shapes.keys())[:len(args)] if dynamic_shapes else [])
    names += [f"input_{i}" for i in range(len(names), len(args))]
    was_training = module.training
    module.train()
    try:
        # Weights only ever leave as external data into a scratch folder
        # that is deleted unread: Orrery never opens them.
        with tempfile.TemporaryDirectory(prefix="orrery-from-torch-") as tmp:
            path = _os.path.join(tmp, "model.onnx")
            kwargs = dict(input_names=names, opset_version=opset,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
            if dynamic_shapes:
                kwargs["dynamic_axes"] = {k: dict(v) for k, v in dynamic_shapes.items()}
            if "dynamo" in torch.onnx.export.__code__.co_varnames:
                kwargs["dynamo"] = False  # the TorchScript exporter: no onnxscript needed
            # The exporter's tracer warns of every Python branch it sees.
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, args, path, **kwargs)
            data = _graph_without_weights(path)
    except Error:
        raise
    except Exception as e:  # the exporter's own failures, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Error(f"from_torch: torch.onnx.export failed: {first}") from e
    finally:
        module.train(was_training)
    return load(data, dims, kernels=kernels,
                name=name or f"<torch {type(module).__name__}>")


def _graph_without_weights(path: str) -> bytes:
    """The exported file's bytes, its weights left out where the onnx
    package is there to drop them (shapes are all Orrery reads; a model of
    billions of parameters must not be held twice)."""
    try:
        import onnx
    except ImportError:
        with open(path, "rb") as f:
            return f.read()
    m = onnx.load(path, load_external_data=False)
    for t in m.graph.initializer:
        # Small tensors (reshape targets, scalars) stay for shape inference;
        # a weight without data loads as its shape (docs/importer.md).
        if len(t.raw_data) > 4096:
            t.ClearField("raw_data")
    return m.SerializeToString()
