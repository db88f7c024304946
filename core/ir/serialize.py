"""Graph IR to and from JSON, with constant tensors kept apart (for an ``.npz``).

No pickle: attribute values are JSON scalars, lists, or arrays stored as
params and referenced by name; sub-graphs (function bodies) nest as JSON.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ArtifactError
from .graph import Graph, Node, Value
from .types import TensorType, np_dtype

#: bumped whenever the JSON layout changes incompatibly
GRAPH_FORMAT_VERSION = 1


class _Writer:
    def __init__(self):
        self.params: dict[str, np.ndarray] = {}
        self.ids: dict[Value, str] = {}
        self._const_ids: dict[int, str] = {}

    def value_ref(self, v: Value | None):
        if v is None:
            return None
        if v.is_const:
            key = id(v.data)
            if key not in self._const_ids:
                name = f"p{len(self.params)}"
                self.params[name] = v.data
                self._const_ids[key] = name
            return {"const": self._const_ids[key], "name": v.name}
        return self.ids[v]

    def define(self, v: Value) -> dict:
        vid = f"v{len(self.ids)}"
        self.ids[v] = vid
        return {"id": vid, "name": v.name, "shape": list(v.type.shape), "dtype": v.type.dtype}

    def attr(self, value: Any):
        if isinstance(value, np.ndarray):
            name = f"p{len(self.params)}"
            self.params[name] = value
            return {"array": name}
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (list, tuple)):
            return [self.attr(v) for v in value]
        if isinstance(value, Graph):
            return {"graph": self.graph(value)}
        if isinstance(value, float) and not np.isfinite(value):
            return {"float": repr(value)}
        return value

    def graph(self, g: Graph) -> dict:
        out = {"name": g.name, "inputs": [self.define(v) for v in g.inputs], "nodes": []}
        for n in g.nodes:
            entry = {"op": n.op, "name": n.name,
                     "inputs": [self.value_ref(v) for v in n.inputs],
                     "attrs": {k: self.attr(v) for k, v in n.attrs.items()}}
            if n.body is not None:
                entry["body"] = self.graph(n.body)
            entry["outputs"] = [self.define(v) for v in n.outputs]
            out["nodes"].append(entry)
        out["outputs"] = [self.value_ref(v) for v in g.outputs]
        return out


def graph_to_json(graph: Graph) -> tuple[dict, dict[str, np.ndarray]]:
    """``(json_dict, params)``: the graph as plain JSON data and its constant arrays."""
    w = _Writer()
    doc = {"format": GRAPH_FORMAT_VERSION, "graph": w.graph(graph)}
    return doc, w.params


class _Reader:
    def __init__(self, params):
        self.params = params
        self.values: dict[str, Value] = {}
        self.consts: dict[str, Value] = {}

    def param(self, name: str) -> np.ndarray:
        try:
            return self.params[name]
        except KeyError:
            raise ArtifactError(f"graph refers to missing parameter {name!r}") from None

    def value_ref(self, ref):
        if ref is None:
            return None
        if isinstance(ref, dict):
            key = ref["const"]
            if key not in self.consts:
                data = self.param(key)
                self.consts[key] = Value(ref.get("name", key), TensorType.of(data), data)
            return self.consts[key]
        try:
            return self.values[ref]
        except KeyError:
            raise ArtifactError(f"graph refers to undefined value {ref!r}") from None

    def define(self, d: dict) -> Value:
        v = Value(d["name"], TensorType(tuple(d["shape"]), d["dtype"]))
        np_dtype(d["dtype"])
        self.values[d["id"]] = v
        return v

    def attr(self, value):
        if isinstance(value, list):
            return [self.attr(v) for v in value]
        if isinstance(value, dict):
            if "array" in value:
                return self.param(value["array"])
            if "graph" in value:
                return self.graph(value["graph"])
            if "float" in value:
                return float(value["float"])
            raise ArtifactError(f"unknown attribute encoding {sorted(value)}")
        return value

    def graph(self, d: dict) -> Graph:
        inputs = [self.define(v) for v in d["inputs"]]
        nodes = []
        for n in d["nodes"]:
            ins = [self.value_ref(r) for r in n["inputs"]]
            attrs = {k: self.attr(v) for k, v in n["attrs"].items()}
            body = self.graph(n["body"]) if "body" in n else None
            outs = [self.define(v) for v in n["outputs"]]
            nodes.append(Node(n["op"], ins, outs, attrs, n["name"], body))
        return Graph(inputs, [self.value_ref(r) for r in d["outputs"]], nodes, d["name"])


def graph_from_json(doc: dict, params: dict[str, np.ndarray]) -> Graph:
    """The graph written by :func:`graph_to_json`; ArtifactError if malformed."""
    if doc.get("format") != GRAPH_FORMAT_VERSION:
        raise ArtifactError(f"graph format {doc.get('format')!r} is not supported "
                            f"(this heterocc reads format {GRAPH_FORMAT_VERSION})")
    try:
        return _Reader(params).graph(doc["graph"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"malformed graph JSON: {type(exc).__name__}: {exc}") from None
