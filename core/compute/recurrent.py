"""RNN, GRU and LSTM, unrolled over the sequence: per step a reduction (the recurrent
matrix product) and elementwise stages for the gates and the new state, in float64
as the reference computes. Steps past a sample's sequence length keep its state and
output zeros; the reverse direction starts each sample at its own last step."""

from __future__ import annotations

from collections.abc import Callable

from .. import te
from ..errors import CompileError
from ..ops.sequence_models import _RECURRENT_KINDS, _activation_names, activation_parameters
from .common import float_only
from .registry import register_compute

F64 = "float64"
#: most time steps unrolled into one kernel
MAX_UNROLLED_STEPS = 64


def _c(value: float):
    return te.const(float(value), F64)


def _sigmoid(x):
    return _c(0.5) * (_c(1.0) + te.tanh(_c(0.5) * x))


def _softplus(x):
    return te.maximum(x, _c(0.0)) + te.log(_c(1.0) + te.exp(-te.fabs(x)))


#: TE forms of the reference's recurrent activations (heterocc.ops.sequence_models)
_ACTIVATIONS: dict[str, Callable] = {
    "relu": lambda x, a, b: te.maximum(x, _c(0.0)),
    "tanh": lambda x, a, b: te.tanh(x),
    "sigmoid": lambda x, a, b: _sigmoid(x),
    "affine": lambda x, a, b: _c(a) * x + _c(b),
    "leakyrelu": lambda x, a, b: te.if_then_else(x >= _c(0.0), x, _c(a) * x),
    "thresholdedrelu": lambda x, a, b: te.if_then_else(x > _c(a), x, _c(0.0)),
    "scaledtanh": lambda x, a, b: _c(a) * te.tanh(_c(b) * x),
    "hardsigmoid": lambda x, a, b: te.minimum(te.maximum(_c(a) * x + _c(b), _c(0.0)), _c(1.0)),
    "elu": lambda x, a, b: te.if_then_else(x >= _c(0.0), x,
                                           _c(a) * (te.exp(te.minimum(x, _c(0.0))) - _c(1.0))),
    "softsign": lambda x, a, b: x / (_c(1.0) + te.fabs(x)),
    "softplus": lambda x, a, b: _softplus(x),
}


def _bound(names: list[str], alphas, betas) -> list[Callable]:
    """Activations with alpha/beta bound as the reference binds them."""
    return [lambda x, fn=_ACTIVATIONS[name], a=alpha, b=beta: fn(x, a, b)
            for name, alpha, beta in activation_parameters(names, alphas, betas)]


def _optional(inputs, index: int):
    return inputs[index] if len(inputs) > index else None


class _Direction:
    """The unrolled steps of one direction ``d``: ``states[t]`` (and ``cells[t]``) hold
    each sample's state after iteration t."""

    def __init__(self, op: str, inputs, attrs, d: int, activations: list[Callable]):
        x, w, r = inputs[:3]
        self.op, self.d, self.activations = op, d, activations
        self.r = r
        b = _optional(inputs, 3)
        lengths = _optional(inputs, 4)
        self.layout = attrs["layout"]
        self.length, self.batch = (x.shape[:2] if self.layout == 0 else x.shape[1::-1])
        self.hidden = r.shape[-1]
        self.gates = w.shape[1]
        self.clip = attrs["clip"]
        self.backwards = attrs["direction"] == "reverse" or d == 1
        self.lengths = lengths
        gates, hidden = self.gates, self.hidden

        def x_at(t, n, i):
            return x[t, n, i] if self.layout == 0 else x[n, t, i]

        def projected_body(t, n, g):
            i = te.reduce_axis(x.shape[2], "i")
            return te.sum(te.cast(F64, x_at(t, n, i.var)) * te.cast(F64, w[d, g, i.var]), axis=i)

        product = te.compute((self.length, self.batch, gates), projected_body,
                             name=f"{op.lower()}_xw{d}", dtype=F64)
        self.projected = te.compute(
            product.shape, lambda t, n, g: product[t, n, g] + self.bias(b, g),
            name=f"{op.lower()}_x{d}", dtype=F64, attrs={"keep": True})
        self.recurrent_bias = (lambda g: self.bias(b, gates + g))
        self.peepholes = _optional(inputs, 7)
        state_shape = (self.batch, hidden)
        self.states = [self._initial(_optional(inputs, 5), state_shape, "h")]
        self.cells = [self._initial(_optional(inputs, 6), state_shape, "c")]
        for t in range(self.length):
            self._step(t, attrs)

    def bias(self, b, g):
        return _c(0.0) if b is None else te.cast(F64, b[self.d, g])

    def _initial(self, given, shape, name: str):
        def body(n, k):
            if given is None:
                return _c(0.0)
            return te.cast(F64, given[self.d, n, k] if self.layout == 0 else given[n, self.d, k])

        return te.compute(shape, body, name=f"{self.op.lower()}_{name}0_{self.d}", dtype=F64,
                          attrs={"keep": True})

    def clipped(self, value):
        if self.clip is None:
            return value
        return te.minimum(te.maximum(value, _c(-self.clip)), _c(self.clip))

    def active(self, t: int, n):
        """Whether sample ``n`` runs iteration ``t``, and the time step it reads."""
        if self.lengths is None:
            step = self.length - 1 - t if self.backwards else t
            return te.const(True, "bool"), te.const(step, "int64")
        length = te.cast("int64", self.lengths[n])
        if not self.backwards:
            return te.const(t, "int64") < length, te.const(t, "int64")
        return te.const(t, "int64") < length, te.maximum(length - 1 - t, te.const(0, "int64"))

    def matmul(self, h, first_gate: int, count: int, name: str):
        """``h @ R[d, first_gate:first_gate + count].T`` plus the recurrent bias."""
        def body(n, g):
            j = te.reduce_axis(self.hidden, "j")
            return te.sum(h[n, j.var] * te.cast(F64, self.r[self.d, first_gate + g, j.var]),
                          axis=j)

        total = te.compute((self.batch, count), body, name=name, dtype=F64)
        return lambda n, g: total[n, g] + self.recurrent_bias(first_gate + g)

    def _step(self, t: int, attrs):
        h, c = self.states[-1], self.cells[-1]
        hidden, prefix = self.hidden, f"{self.op.lower()}_{self.d}_t{t}"

        def pre(n, g):
            _, step = self.active(t, n)
            return self.projected[step, n, g]

        def keep_state(new, old, name):
            return te.compute((self.batch, hidden), lambda n, k: te.if_then_else(
                self.active(t, n)[0], new(n, k), old[n, k]), name=name, dtype=F64,
                attrs={"keep": True})

        if self.op == "RNN":
            rh = self.matmul(h, 0, hidden, prefix + "_rh")
            (f,) = self.activations
            new_h = lambda n, k: f(self.clipped(pre(n, k) + rh(n, k)))  # noqa: E731
            self.states.append(keep_state(new_h, h, prefix + "_h"))
            self.cells.append(c)
            return
        if self.op == "GRU":
            f, g = self.activations
            rzr = self.matmul(h, 0, 2 * hidden, prefix + "_rzr")
            gates = te.compute((self.batch, 2 * hidden), lambda n, k: f(self.clipped(
                pre(n, k) + rzr(n, k))), name=prefix + "_zr", dtype=F64, attrs={"keep": True})
            if attrs["linear_before_reset"]:
                rh = self.matmul(h, 2 * hidden, hidden, prefix + "_rh")
                candidate_pre = lambda n, k: gates[n, hidden + k] * rh(n, k)  # noqa: E731
            else:
                reset_h = te.compute((self.batch, hidden), lambda n, k: gates[n, hidden + k]
                                     * h[n, k], name=prefix + "_reset_h", dtype=F64,
                                     attrs={"keep": True})
                candidate_pre = self.matmul(reset_h, 2 * hidden, hidden, prefix + "_rh")

            def new_h(n, k):
                candidate = g(self.clipped(pre(n, 2 * hidden + k) + candidate_pre(n, k)))
                update = gates[n, k]
                return (_c(1.0) - update) * candidate + update * h[n, k]

            self.states.append(keep_state(new_h, h, prefix + "_h"))
            self.cells.append(c)
            return
        f, g, act_h = self.activations
        rh = self.matmul(h, 0, 4 * hidden, prefix + "_rh")
        p = self.peepholes

        def peep(gate: int, n, k, cell):
            if p is None:
                return _c(0.0)
            return te.cast(F64, p[self.d, gate * hidden + k]) * cell[n, k]

        def gate_pre(gate: int, n, k):
            return pre(n, gate * hidden + k) + rh(n, gate * hidden + k)

        def new_c(n, k):
            i = f(self.clipped(gate_pre(0, n, k) + peep(0, n, k, c)))
            forget = (_c(1.0) - i) if attrs["input_forget"] else \
                f(self.clipped(gate_pre(2, n, k) + peep(2, n, k, c)))
            return forget * c[n, k] + i * g(self.clipped(gate_pre(3, n, k)))

        cell = keep_state(new_c, c, prefix + "_c")

        def new_h(n, k):
            o = f(self.clipped(gate_pre(1, n, k) + peep(1, n, k, cell)))
            return o * act_h(cell[n, k])

        self.states.append(keep_state(new_h, h, prefix + "_h"))
        self.cells.append(cell)

    def output_at(self, s, n, k):
        """Y at time step ``s``: the state after the iteration that read step ``s``, or
        0 past the sample's length."""
        if self.lengths is None:
            iteration = (self.length - 1 - s) if self.backwards else s
            inside = te.const(True, "bool")
        else:
            length = te.cast("int64", self.lengths[n])
            iteration = (length - 1 - s) if self.backwards else te.cast("int64", s)
            inside = te.cast("int64", s) < length
        value = _c(0.0)
        for t in range(self.length):
            value = te.if_then_else(te.equal(iteration, t), self.states[t + 1][n, k], value)
        return te.if_then_else(inside, value, _c(0.0))


def _recurrent_compute(op: str):
    kind = _RECURRENT_KINDS[op]

    def compute(inputs, attrs, out_types):
        x = inputs[0]
        float_only(x.dtype, op)
        length = x.shape[0] if attrs["layout"] == 0 else x.shape[1]
        if length > MAX_UNROLLED_STEPS:
            raise CompileError(f"{op} over {length} steps has no TE compute (at most "
                               f"{MAX_UNROLLED_STEPS} are unrolled)")
        if length == 0:
            raise CompileError(f"{op} over an empty sequence has no TE compute")
        names = _activation_names(kind, attrs)
        functions = _bound(names, attrs["activation_alpha"], attrs["activation_beta"])
        per = len(kind.activations)
        dirs = inputs[1].shape[0]
        directions = [_Direction(op, inputs, attrs, d, functions[d * per:(d + 1) * per])
                      for d in range(dirs)]
        dtype = x.dtype
        layout = attrs["layout"]

        def y_body(*index):
            s, d, n, k = index if layout == 0 else (index[1], index[2], index[0], index[3])
            value = directions[-1].output_at(s, n, k)
            for direction in reversed(directions[:-1]):
                value = te.if_then_else(te.equal(d, direction.d), direction.output_at(s, n, k),
                                        value)
            return te.cast(dtype, value)

        def final(pick):
            def body(*index):
                d, n, k = index if layout == 0 else (index[1], index[0], index[2])
                value = pick(directions[-1])[n, k]
                for direction in reversed(directions[:-1]):
                    value = te.if_then_else(te.equal(d, direction.d), pick(direction)[n, k],
                                            value)
                return te.cast(dtype, value)

            return body

        outputs = [te.compute(out_types[0].shape, y_body, name=f"{op.lower()}_y", dtype=dtype),
                   te.compute(out_types[1].shape, final(lambda r: r.states[-1]),
                              name=f"{op.lower()}_y_h", dtype=dtype)]
        if kind.states == 2 and len(out_types) > 2:
            outputs.append(te.compute(out_types[2].shape, final(lambda r: r.cells[-1]),
                                      name=f"{op.lower()}_y_c", dtype=dtype))
        return outputs[:len(out_types)]

    return compute


for _op in _RECURRENT_KINDS:
    register_compute(_op)(_recurrent_compute(_op))
