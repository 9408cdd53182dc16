"""The op template: one declaration per op registers everything torch needs (CONTRIBUTING "Adding an op").

    _knn = Op(
        "warpgeo::knn",
        check=_check_knn,        # shape / dtype / device rules of every input; reads no tensor values
        impl=_knn_impl,          # value checks (switchable), then the Warp launches; typed: the schema
        fake=_knn_fake,          # empty outputs of the right shapes (torch.compile, opcheck)
        setup=_setup_knn,        # autograd: setup_context(ctx, inputs, output) ...
        backward=_backward_knn,  # ... and backward(ctx, *grads), or neither for an op with no gradient
    )
    dists, idx = _knn.call(queries=q, points=p, query_lengths=None, point_lengths=None, k=8)

From that one declaration:

* ``torch.ops.warpgeo.knn`` is registered (``torch.library.custom_op``, its schema read from ``impl``'s
  annotations), its fake runs ``check`` and then ``fake``, and ``register_autograd(backward, setup)``;
* every entry point runs ``check`` exactly once, before any launch: the registered op, its fake, the
  op's autograd Function and :meth:`Op.call`;
* :meth:`Op.call` is the eager fast path: the registered op where something traces (``torch.compile``,
  export, fake or functional tensors), else the Function when a gradient may be needed, else the checked
  implementation itself (the custom-op dispatcher costs more than a small launch);
* :meth:`Op.function` makes the op's public ``torch.autograd.Function`` class (same forward, same setup /
  backward pair: what ``opcheck`` tests is what users run).
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["REGISTRY", "Op"]

#: Every op an :class:`Op` declared, by name (``"warpgeo::knn"`` -> its Op), in declaration order: complete
#: once every op module is imported (``warpgeo.load_ops()``). The per-op guarantee suites (sync-free, threads,
#: budgets, CUDA graphs, hostile cases) read it, so a new op fails them until they cover it.
REGISTRY: dict[str, Op] = {}


class Op:
    """One warpgeo op: a ``torch.library`` custom op with its fake, autograd and eager fast path.

    Args:
        name: ``"warpgeo::<op>"``.
        check: ``check(*inputs)``: the shape checks (ValueError / TypeError naming the argument); reads no
            tensor values.
        impl: ``impl(*inputs)``: value checks under ``checks.checking_values``, then the launches. Its
            parameters (names, order, annotations) are the op's inputs and schema.
        fake: ``fake(*inputs)``: outputs of the right shape, dtype and device, computing nothing.
        setup: ``setup(ctx, inputs, output)`` for autograd (``save_for_backward``,
            ``set_materialize_grads(False)``, ``mark_non_differentiable``).
        backward: ``backward(ctx, *grad_outputs)`` -> one gradient (or None) per input; see :meth:`grads`.
        mutates_args: the inputs ``impl`` writes in place.
    """

    def __init__(
        self,
        name: str,
        *,
        check: Callable[..., None],
        impl: Callable[..., Any],
        fake: Callable[..., Any],
        setup: Callable[..., None] | None = None,
        backward: Callable[..., Any] | None = None,
        mutates_args: Sequence[str] = (),
    ) -> None:
        if (setup is None) != (backward is None):
            raise TypeError(f"internal error: {name}: give setup and backward together, or neither")
        self.name = name
        self.check = check
        self.impl = impl
        #: the op's inputs, in order (from ``impl``'s signature)
        self.inputs: tuple[str, ...] = tuple(inspect.signature(impl).parameters)
        self._positions = {n: i for i, n in enumerate(self.inputs)}
        #: ``args`` -> the inputs' values in order (KeyError naming the first one missing)
        self._ordered: Callable[[dict[str, Any]], tuple[Any, ...]] = (
            operator.itemgetter(*self.inputs)
            if len(self.inputs) > 1
            else lambda args: (args[self.inputs[0]],)
        )

        def checked(*args: Any) -> Any:
            check(*args)
            return impl(*args)

        def checked_fake(*args: Any) -> Any:
            check(*args)
            return fake(*args)

        #: ``check`` then ``impl``: what every eager entry point runs
        self.run = checked
        schema = torch.library.infer_schema(impl, mutates_args=tuple(mutates_args))
        #: positions of list-of-tensors inputs (``Tensor[]`` in the schema)
        self._list_inputs = tuple(
            i for i, arg in enumerate(schema.split("->")[0].strip("( ").split(",")) if "Tensor[]" in arg
        )
        #: the registered custom op (``torch.ops.warpgeo.<op>``)
        self.custom = torch.library.custom_op(name, checked, mutates_args=tuple(mutates_args), schema=schema)
        self.custom.register_fake(checked_fake)
        self.setup = setup
        self.backward = backward
        self._function: type[torch.autograd.Function] | None = None
        if backward is not None:
            self.custom.register_autograd(backward, setup_context=setup)
            self._function = self.function(f"_{name.split('::')[-1]}")
        REGISTRY[name] = self

    def function(self, name: str, doc: str | None = None) -> type[torch.autograd.Function]:
        """A ``torch.autograd.Function`` class running this op: ``forward`` is :attr:`run` then ``setup``,
        ``backward`` is the op's registered backward. ``apply`` takes the op's inputs in order.

        It is old-style (``forward(ctx, *inputs)``): a new-style Function binds its arguments through
        ``inspect`` on every call, which costs more than a small launch."""
        run, setup, backward = self.run, self.setup, self.backward
        if backward is None:
            raise TypeError(f"internal error: {self.name} has no backward, hence no Function")

        def forward(ctx: Any, *inputs: Any) -> Any:
            output = run(*inputs)
            setup(ctx, inputs, output)
            return output

        namespace = {
            "__doc__": doc or f"``torch.ops.{self.name.replace('::', '.')}`` as an autograd Function.",
            "__module__": getattr(self.impl, "__module__", __name__),
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
        }
        return type(name, (torch.autograd.Function,), namespace)

    def grads(self, ctx: Any = None, /, **given: torch.Tensor | None) -> tuple[Any, ...]:
        """A backward's return value: the gradient of each input by name, ``None`` for the others.

        An op with a list-of-tensors input passes its ``ctx``: the registered op's autograd flattens such an
        input and wants a list of as many gradients (Nones) for it, a Function one None."""
        for name in given:
            if name not in self._positions:
                raise TypeError(f"internal error: {self.name} has no input {name!r}")
        grads = [given.get(name) for name in self.inputs]
        if self._list_inputs:
            if ctx is None:
                raise TypeError(f"internal error: {self.name} has list inputs: pass ctx to grads()")
            for i in self._list_inputs:
                needs = ctx.needs_input_grad[i]
                if isinstance(needs, (list, tuple)) and grads[i] is None:
                    grads[i] = [None] * len(needs)
        return tuple(grads)

    def call(self, **args: Any) -> Any:
        """Run the op on its inputs (all of them, by name) the cheapest way that is still correct."""
        if torch.compiler.is_compiling():  # dynamo cannot trace an itemgetter
            ordered = tuple(args[name] for name in self.inputs)
        else:
            ordered = self._ordered(args)
        if len(args) != len(ordered):
            unexpected = sorted(set(args) - set(self.inputs))
            raise TypeError(f"internal error: {self.name} got unexpected inputs {unexpected}")
        return self.call_ordered(ordered)

    def call_ordered(self, ordered: tuple[Any, ...]) -> Any:
        if torch.compiler.is_compiling():
            return self.custom(*ordered)
        # One pass: is any value traced (a tensor subclass, also inside a list input; the registered op
        # then), and does a plain tensor want a gradient (the Function then, if the op has one)?
        grad = self._function is not None and torch.is_grad_enabled()
        needs_grad = False
        for v in ordered:
            kind = type(v)
            if kind is torch.Tensor:
                if grad and v.requires_grad:
                    needs_grad = True
            elif kind not in _PLAIN and not _plain_value(v):
                return self.custom(*ordered)
        if needs_grad:
            return self._function.apply(*ordered)  # type: ignore[union-attr]
        return self.run(*ordered)

    def in_backward(self, *tensors: Any) -> Callable[..., Any]:
        """For a backward that calls this op: the registered op when a graph of the backward is being built
        (double backward, ``torch.compile``), else the bare implementation (the eager fast path: what it
        takes was checked by the forward, and autograd checks ``grad_output`` against the forward's output:
        shape, dtype, device)."""
        if torch.is_grad_enabled() or not _plain_eager(tensors):
            return self.custom
        return self.impl


#: The types of a plain eager call's values (and of what a list input holds) that nothing traces.
_PLAIN = frozenset({torch.Tensor, type(None), int, float, bool, str})


def _plain_value(v: Any) -> bool:
    """``v`` (of a type not in :data:`_PLAIN`) is no traced tensor: not a tensor subclass (fake or functional
    tensors under AOT autograd, ...), nor a list or tuple holding one."""
    if isinstance(v, torch.Tensor):
        return False
    if isinstance(v, (list, tuple)) and not _PLAIN.issuperset(map(type, v)):
        return not any(isinstance(t, torch.Tensor) and type(t) is not torch.Tensor for t in v)
    return True


def _plain_eager(values: Sequence[Any]) -> bool:
    """True unless something traces these values: torch.compile / export, or tensor subclasses (fake or
    functional tensors under AOT autograd, ...), which must see the registered custom op."""
    if torch.compiler.is_compiling():
        return False
    return all(type(v) in _PLAIN or _plain_value(v) for v in values)
