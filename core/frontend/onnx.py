"""ONNX models to the Graph IR.

The model is checked with ``onnx.checker``, brought to a recent opset with
``onnx.version_converter`` and validated with ``onnx.shape_inference``; the
Graph IR's own types then come from the op registry's type inference, so
every shape is static. A node of another domain than ONNX's (ONNX Runtime's
``com.microsoft`` quantized ops, say) is imported when the registry has an op
for its (domain, op_type), as ``<domain>.<op_type>``.

Shape-like operands (Reshape's shape, Pad's pads, Slice's starts, ...) are
usually constants, or computed from shapes (Shape -> Gather -> Concat): the
importer evaluates every node whose inputs are all constants, so those become
constants too. When such an operand comes from a graph input instead, import
raises :class:`SpecializationNeeded` naming the inputs; the compiler then
imports again with their run-time values bound (``values=``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper, version_converter

from ..errors import InputError, ModelLoadError, TypeInferenceError, UnsupportedOpError
from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ir.types import TensorType, dtype_from_onnx
from ..ops import DEFAULT_DOMAINS, ShapeOperandError, get_op, has_op, infer_node_types, op_key
from ..passes.fold_constants import SHAPE_ONLY_OPS, can_fold, fold_node
from .attributes import attribute_value, node_attributes
from .external_data import external_tensors, load_external_data

#: opset that older models are converted to; the op registry implements its semantics
#: (and later additions).
BASE_OPSET = 18

_DEFAULT_DOMAINS = DEFAULT_DOMAINS

#: ops never evaluated at import: a quantized weight must stay integer until the
#: quantization passes have seen it (fold_constants folds what they leave)
_KEEP_AT_IMPORT = frozenset({"DequantizeLinear"})

#: import-time evaluation is for shape plumbing; bigger constant work is the fold pass
_FOLD_LIMIT_BYTES = 1 << 20


class SpecializationNeeded(TypeInferenceError):
    """A shape-like operand depends on the values of graph inputs ``inputs``."""

    def __init__(self, inputs: Sequence[str], node: str, op: str):
        self.inputs = list(inputs)
        super().__init__(f"{op} (node {node!r}): its output shape depends on the values of "
                         f"graph input(s) {', '.join(self.inputs)}")


class DynamicShapeError(InputError):
    """A graph input has symbolic or unknown dimensions and no shape was given."""

    def __init__(self, dims: dict[str, tuple]):
        self.dims = dims
        listed = "; ".join(f"{name}: {shape}" for name, shape in dims.items())
        super().__init__(f"input shape(s) not static: {listed}; pass shapes={{name: shape}}")


def load_model(model) -> onnx.ModelProto:
    """A ModelProto from a path, bytes or a ModelProto; ModelLoadError if unreadable.

    Tensors kept in external data files are read in: relative to the model file's
    folder for a path (wherever the process runs), to the current directory for bytes
    or a ModelProto (which is then copied, not changed); see ``external_data``."""
    return load_model_and_bytes(model)[0]


def load_model_and_bytes(model) -> tuple[onnx.ModelProto, bytes | None]:
    """:func:`load_model`'s ModelProto, and the serialized model it was parsed from
    when that is the whole model (read from a path or given as bytes, no external
    data): what :func:`_check` takes instead of serializing the proto again."""
    base_dir = os.getcwd()
    if isinstance(model, onnx.ModelProto):
        if not any(external_tensors(model)):
            return model, None
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return load_external_data(copy, base_dir), None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        base_dir = os.path.dirname(os.path.abspath(path))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ModelLoadError(f"cannot read model file {path!r}: {exc.strerror}") from None
        source = repr(path)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data, source = bytes(model), "the given bytes"
    else:
        raise ModelLoadError("expected a path, bytes or onnx.ModelProto, got "
                             f"{type(model).__name__}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf raises its own DecodeError
        raise ModelLoadError(f"{source} is not a valid ONNX model (truncated or not protobuf): "
                             f"{exc}") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{source} holds no ONNX graph (empty or not an ONNX model)")
    if any(external_tensors(proto)):
        return load_external_data(proto, base_dir), None
    return proto, data


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    return 1


def _check(model: onnx.ModelProto, serialized: bytes | None = None) -> None:
    """ModelLoadError unless ``model`` passes ``onnx.checker``; ``serialized``: the
    bytes it was parsed from, checked instead (the checker takes bytes, and serializing
    a model of many weights again costs more than the check: ResNet-18's 47 MB, 0.08
    of 0.09 s)."""
    try:
        onnx.checker.check_model(model if serialized is None else serialized)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"the model fails onnx.checker: {first}") from None


def _upgrade(model: onnx.ModelProto) -> onnx.ModelProto:
    """Convert to BASE_OPSET when older; keep the original if the converter cannot."""
    opset = default_opset(model)
    if opset >= BASE_OPSET:
        return model
    if _unchanged_up_to_base(model, opset):
        return _with_base_opset(model)
    try:
        converted = version_converter.convert_version(model, BASE_OPSET)
    except Exception:  # the converter lacks adapters for some ops; the registry also
        return model  # accepts the older attribute forms
    if opset < 11:
        _keep_asymmetric_resize(model, converted)
    return converted


def _graph_nodes(graph: onnx.GraphProto):
    """Every node of ``graph`` and of the graphs its nodes' attributes hold."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graph_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _graph_nodes(g)


def _unchanged_up_to_base(model: onnx.ModelProto, opset: int) -> bool:
    """Whether no ONNX op of ``model`` (at ``opset``) has another definition at
    BASE_OPSET, so that converting it would change nothing but its opset: the version
    converter copies the whole model, weights included, through its serialized form
    (ResNet-18: 0.27 s of a 3 s compile). Models with functions are left to it."""
    if model.functions:
        return False
    for node in _graph_nodes(model.graph):
        if node.domain not in _DEFAULT_DOMAINS:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, BASE_OPSET, node.domain)
        except onnx.defs.SchemaError:
            return False
        if schema.since_version > opset:
            return False
    return True


def _with_base_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` that imports ONNX's ops at BASE_OPSET."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for imp in copy.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            imp.version = BASE_OPSET
    return copy


def _keep_asymmetric_resize(original: onnx.ModelProto, converted: onnx.ModelProto) -> None:
    """Resize-10 and Upsample sample at asymmetric coordinates, rounding down; the
    converter's Resize-11 would default to half_pixel, so say so explicitly."""
    old = {n.output[0] for n in original.graph.node if n.op_type in ("Resize", "Upsample")}
    for node in converted.graph.node:
        if node.op_type != "Resize" or node.output[0] not in old:
            continue
        present = {a.name for a in node.attribute}
        if "coordinate_transformation_mode" not in present:
            node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode",
                                                             "asymmetric"))
        if "nearest_mode" not in present:
            node.attribute.append(onnx.helper.make_attribute("nearest_mode", "floor"))


def _validate_shapes(model: onnx.ModelProto) -> None:
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False)
    except onnx.shape_inference.InferenceError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ModelLoadError(f"ONNX shape inference rejects the model: {first}") from None


#: ops whose graph attributes (bodies) the importer understands
_CONTROL_FLOW = ("If", "Loop", "Scan")


def _collect_unsupported(graph: onnx.GraphProto, missing: dict[str, list[str]]) -> None:
    """Every node whose (domain, op_type) the op registry lacks, by qualified op name."""
    for i, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{i}"
        standard = node.domain in _DEFAULT_DOMAINS
        if not (standard and node.op_type == "Constant") and not has_op(node.op_type,
                                                                         node.domain):
            missing.setdefault(op_key(node.op_type, node.domain), []).append(name)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH and standard and node.op_type in _CONTROL_FLOW:
                _collect_unsupported(a.g, missing)
            elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                missing.setdefault(f"{node.op_type} (sub-graph)", []).append(name)


def _unsupported(model: onnx.ModelProto) -> None:
    missing: dict[str, list[str]] = {}
    _collect_unsupported(model.graph, missing)
    if missing:
        raise UnsupportedOpError(missing)


def _value_info_type(vi: onnx.ValueInfoProto, given: Sequence[int] | None) -> TensorType:
    t = vi.type
    if not t.HasField("tensor_type"):
        raise ModelLoadError(f"input {vi.name!r}: only tensor inputs are supported "
                             f"(got {t.WhichOneof('value')})")
    tt = t.tensor_type
    try:
        dtype = dtype_from_onnx(tt.elem_type)
    except TypeInferenceError as exc:
        raise ModelLoadError(f"input {vi.name!r}: {exc}") from None
    if given is not None:
        return TensorType(tuple(given), dtype)
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        else:
            dims.append(d.dim_param or "?")
    if not tt.HasField("shape") or any(isinstance(d, str) for d in dims):
        raise DynamicShapeError({vi.name: tuple(dims) if tt.HasField("shape") else "unknown"})
    return TensorType(tuple(dims), dtype)


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray:
    attrs = node_attributes(node)
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "sparse_value" in [a.name for a in node.attribute]:
        raise UnsupportedOpError({"Constant (sparse_value)": [node.name]})
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise UnsupportedOpError({"Constant (string value)": [node.name]})


@dataclass
class _Importer:
    values: dict[str, Value]
    names: NameScope  # value names
    node_names: NameScope
    opset: int
    nodes: list[Node]
    origin: dict[Value, set[str]]  # graph inputs each non-constant value depends on
    #: for a sub-graph: the enclosing importer; outer values it reads become captures
    parent: _Importer | None = None
    #: inline=True: outer values are used directly (a branch spliced into its parent)
    inline: bool = False
    captures: dict[Value, Value] | None = None  # outer value -> this graph's parameter

    def input_value(self, name: str) -> Value | None:
        if not name:
            return None
        if name in self.values:
            return self.values[name]
        if self.parent is not None:
            outer = self.parent.input_value(name)
            if self.inline or outer.is_const:
                return outer
            param = self.captures.get(outer)
            if param is None:
                param = self.captures[outer] = Value(self.names.fresh(name), outer.type)
                self.origin[param] = self.parent.origin.get(outer, set())
            return param
        raise ModelLoadError(f"tensor {name!r} is used before it is defined "
                             "(the graph is not topologically sorted, or has a cycle)")

    def child(self, inline: bool = False) -> _Importer:
        """An importer for a sub-graph of this one."""
        return _Importer({}, NameScope() if not inline else self.names,
                         NameScope() if not inline else self.node_names, self.opset,
                         self.nodes if inline else [], self.origin if inline else {},
                         self, inline, None if inline else {})


def from_onnx(model, shapes: Mapping[str, Sequence[int]] | None = None,
              values: Mapping[str, np.ndarray] | None = None, check: bool = True) -> Graph:
    """Import an ONNX model (path, bytes or ModelProto) as a Graph.

    ``shapes`` fixes the shapes of graph inputs (needed for symbolic dims);
    ``values`` binds graph inputs to constants (they leave the graph's inputs).
    Raises ModelLoadError, UnsupportedOpError (naming every unsupported op
    type and its nodes), DynamicShapeError or SpecializationNeeded.
    """
    proto, serialized = load_model_and_bytes(model)
    if check:
        _check(proto, serialized)
    _unsupported(proto)
    proto = _upgrade(proto)
    if check:
        _validate_shapes(proto)
    shapes = dict(shapes or {})
    values = {k: np.asarray(v) for k, v in (values or {}).items()}
    g = proto.graph
    scope = NameScope()
    imp = _Importer({}, scope, NameScope(), default_opset(proto), [], {})

    for init in g.initializer:
        array = numpy_helper.to_array(init)
        imp.values[init.name] = constant(array, scope.fresh(init.name))
    inputs: list[Value] = []
    dynamic: dict[str, tuple] = {}
    for vi in g.input:
        if vi.name in imp.values:  # an initializer listed as input: a constant
            continue
        if vi.name in values:
            imp.values[vi.name] = constant(values[vi.name], scope.fresh(vi.name))
            continue
        try:
            ttype = _value_info_type(vi, shapes.get(vi.name))
        except DynamicShapeError as exc:
            dynamic.update(exc.dims)
            continue
        v = Value(scope.fresh(vi.name), ttype)
        imp.values[vi.name] = v
        imp.origin[v] = {vi.name}
        inputs.append(v)
    if dynamic:
        raise DynamicShapeError(dynamic)
    unknown = sorted(set(shapes) - {vi.name for vi in g.input})
    if unknown:
        raise InputError(f"shapes given for unknown input(s) {', '.join(unknown)}; "
                         f"the model's inputs are {', '.join(vi.name for vi in g.input)}")

    for i, node in enumerate(g.node):
        _import_node(imp, node, node.name or f"{node.op_type}_{i}")

    outputs = []
    for vo in g.output:
        if vo.name not in imp.values:
            raise ModelLoadError(f"graph output {vo.name!r} is not produced by any node")
        outputs.append(imp.values[vo.name])
    return Graph(inputs, outputs, imp.nodes, g.name or "main")


def _import_node(imp: _Importer, node: onnx.NodeProto, name: str) -> None:
    standard = node.domain in _DEFAULT_DOMAINS
    if standard and node.op_type == "Constant":
        imp.values[node.output[0]] = constant(_constant_node_value(node),
                                              imp.names.fresh(node.output[0]))
        return
    if standard and node.op_type in _CONTROL_FLOW:
        _import_control_flow(imp, node, name)
        return
    op = get_op(node.op_type, node.domain)
    raw = node_attributes(node)
    if op.name == "DFT" and imp.opset < 20 and "axis" not in raw \
            and (len(node.input) < 3 or not node.input[2]):
        raw["axis"] = 1  # DFT-17's default axis; opset 20 moved it to -2
    if op.name == "Split" and "num_outputs" not in raw and "split" not in raw \
            and (len(node.input) < 2 or not node.input[1]):
        raw["num_outputs"] = len(node.output)
    _add_node(imp, op.name, op.normalize_attrs(raw, name),
              [imp.input_value(n) for n in node.input], list(node.output), name)


def _add_node(imp: _Importer, op_name: str, attrs: dict, inputs: list[Value | None],
              output_names: list[str], name: str) -> None:
    """Type, fold (when all-constant and small) or append one node."""
    op = get_op(op_name)
    types = [v.type if v is not None else None for v in inputs]
    consts = [v.data if v is not None else None for v in inputs]
    try:
        out_types = infer_node_types(op, types, consts, attrs, len(output_names), name)
    except ShapeOperandError as exc:
        culprit = inputs[exc.value_index]
        raise SpecializationNeeded(sorted(imp.origin.get(culprit, set())), name, op.name) \
            from None
    if len(out_types) < len([o for o in output_names if o]):
        raise TypeInferenceError(f"{op.name} (node {name!r}) has {len(output_names)} outputs, "
                                 f"the op defines {len(out_types)}")

    folded = _fold(op, inputs, attrs, out_types)
    outs = []
    for k, out_name in enumerate(output_names):
        if folded is not None:
            v = constant(folded[k].astype(out_types[k].dtype, copy=False),
                         imp.names.fresh(out_name or f"{name}_out{k}"))
        else:
            v = Value(imp.names.fresh(out_name or f"{name}_out{k}"), out_types[k])
        if out_name:
            imp.values[out_name] = v
        outs.append(v)
    if folded is not None:
        return
    deps: set[str] = set()
    for v in inputs:
        if v is not None:
            deps |= imp.origin.get(v, set())
    for v in outs:
        imp.origin[v] = deps
    imp.nodes.append(Node(op.name, inputs, outs, attrs, imp.node_names.fresh(name)))


def _import_body(imp: _Importer, body: onnx.GraphProto, formal: list[TensorType],
                 inline: bool = False):
    """Import a sub-graph whose formal inputs have types ``formal``.

    Returns (graph, captured outer values); with ``inline`` its nodes go straight
    into the parent and the result is its list of output values instead.
    """
    sub = imp.child(inline)
    params = []
    for vi, t in zip(body.input, formal):
        v = Value(sub.names.fresh(vi.name), t)
        sub.values[vi.name] = v
        params.append(v)
    for init in body.initializer:
        sub.values[init.name] = constant(numpy_helper.to_array(init), sub.names.fresh(init.name))
    for i, node in enumerate(body.node):
        _import_node(sub, node, node.name or f"{node.op_type}_{i}")
    outputs = [sub.input_value(o.name) for o in body.output]
    if inline:
        return outputs
    captured = list(sub.captures)
    graph = Graph(params + [sub.captures[v] for v in captured], outputs, sub.nodes,
                  body.name or "body")
    return graph, captured


def _unroll_loop(imp: _Importer, node: onnx.NodeProto, body: onnx.GraphProto,
                 inputs: list[Value | None], name: str) -> None:
    """Evaluate a Loop at import time, iteration by iteration (all inputs constant)."""
    dynamic = [v for v in inputs if v is not None and not v.is_const]
    if dynamic:
        origins = set().union(*(imp.origin.get(v, set()) for v in dynamic))
        raise SpecializationNeeded(sorted(origins), name, "Loop")
    limit = None if not inputs or inputs[0] is None else int(inputs[0].data.reshape(()))
    going = True if len(inputs) < 2 or inputs[1] is None else bool(inputs[1].data.reshape(()))
    carried = [v.data for v in inputs[2:]]
    scans: list[list[np.ndarray]] = []
    i = 0
    while going and (limit is None or i < limit):
        sub = imp.child(inline=True)
        formal = [np.asarray(i, np.int64), np.asarray(going), *carried]
        for vi, data in zip(body.input, formal):
            sub.values[vi.name] = constant(np.asarray(data), sub.names.fresh(vi.name))
        for init in body.initializer:
            sub.values[init.name] = constant(numpy_helper.to_array(init),
                                             sub.names.fresh(init.name))
        for k, inner in enumerate(body.node):
            _import_node(sub, inner, inner.name or f"{inner.op_type}_{k}")
        outs = [sub.input_value(o.name) for o in body.output]
        if not all(v.is_const for v in outs):
            raise TypeInferenceError(f"Loop (node {name!r}): its body does not evaluate to "
                                     "constants; loops whose shapes change per iteration "
                                     "need constant inputs")
        going = bool(outs[0].data.reshape(()))
        carried = [v.data for v in outs[1:1 + len(carried)]]
        for k, v in enumerate(outs[1 + len(carried):]):
            if len(scans) <= k:
                scans.append([])
            scans[k].append(v.data)
        i += 1
    n_scan = len(body.output) - 1 - len(carried)
    results = carried + [np.stack(scans[k]) if k < len(scans) else np.zeros((0,), np.float32)
                         for k in range(n_scan)]
    for out_name, data in zip(node.output, results):
        if out_name:
            imp.values[out_name] = constant(np.asarray(data), imp.names.fresh(out_name))


def _with_captures(graph: Graph, captured: list[Value], union: list[Value]) -> Graph:
    """``graph`` taking parameters for every value of ``union`` (in that order)."""
    own = dict(zip(captured, graph.inputs[len(graph.inputs) - len(captured):]))
    formal = graph.inputs[:len(graph.inputs) - len(captured)]
    params = [own.get(v) or Value(v.name, v.type) for v in union]
    return Graph(formal + params, graph.outputs, graph.nodes, graph.name)


def _graph_attrs(node: onnx.NodeProto) -> tuple[dict, dict]:
    plain, graphs = {}, {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            graphs[a.name] = a.g
        else:
            plain[a.name] = attribute_value(a, node.name, node.op_type)
    return plain, graphs


def _import_control_flow(imp: _Importer, node: onnx.NodeProto, name: str) -> None:
    plain, graphs = _graph_attrs(node)
    inputs = [imp.input_value(n) for n in node.input]
    if node.op_type == "If":
        cond = inputs[0]
        if cond.is_const:  # a known condition: splice the chosen branch in
            branch = graphs["then_branch" if bool(cond.data.reshape(())) else "else_branch"]
            outs = _import_body(imp, branch, [], inline=True)
            for out_name, v in zip(node.output, outs):
                if out_name:
                    imp.values[out_name] = v
            return
        then_g, then_c = _import_body(imp, graphs["then_branch"], [])
        else_g, else_c = _import_body(imp, graphs["else_branch"], [])
        union = then_c + [v for v in else_c if v not in then_c]
        attrs = {"then_branch": _with_captures(then_g, then_c, union),
                 "else_branch": _with_captures(else_g, else_c, union)}
        _add_node(imp, "If", attrs, [cond, *union], list(node.output), name)
        return
    if node.op_type == "Loop":
        carried = inputs[2:]
        formal = [TensorType((), "int64"), TensorType((), "bool")] + [v.type for v in carried]
        try:
            body, captured = _import_body(imp, graphs["body"], formal)
        except SpecializationNeeded:
            # the body's shapes change with the iteration: unroll it on constant inputs
            _unroll_loop(imp, node, graphs["body"], inputs, name)
            return
        padded = inputs + [None] * (2 - len(inputs)) if len(inputs) < 2 else inputs
        attrs = get_op("Loop").normalize_attrs({"body": body, "num_captures": len(captured)},
                                               name)
        _add_node(imp, "Loop", attrs, [*padded, *captured], list(node.output), name)
        return
    # Scan (opset 9+): states, then scan inputs sliced along their scan axes
    n_scan = plain["num_scan_inputs"]
    n_state = len(inputs) - n_scan
    axes = plain.get("scan_input_axes") or [0] * n_scan
    formal = [v.type for v in inputs[:n_state]]
    for v, axis in zip(inputs[n_state:], axes):
        shape = list(v.type.shape)
        del shape[axis % len(shape)]
        formal.append(TensorType(tuple(shape), v.type.dtype))
    body, captured = _import_body(imp, graphs["body"], formal)
    attrs = get_op("Scan").normalize_attrs({**plain, "body": body,
                                            "num_captures": len(captured)}, name)
    _add_node(imp, "Scan", attrs, [*inputs, *captured], list(node.output), name)


def _fold(op, inputs: list[Value | None], attrs, out_types) -> list[np.ndarray] | None:
    """Outputs of a node evaluable now: Shape/Size of a static tensor, or small all-constant."""
    if op.name in _KEEP_AT_IMPORT or not can_fold(op.name, inputs):
        return None
    if op.name not in SHAPE_ONLY_OPS and (
            sum(v.type.nbytes for v in inputs if v is not None) > _FOLD_LIMIT_BYTES
            or sum(t.nbytes for t in out_types) > _FOLD_LIMIT_BYTES):
        return None
    return fold_node(op, inputs, attrs)
