"""Middleware and lifecycle hooks: code around every handler's call, registered once.

``@pgdrain.middleware`` registers ``fn(job, call_next)``, which runs the rest of the chain and
the handler when it calls ``call_next()`` and returns what the handler returned (or something
else: what it returns is the job's result). ``@pgdrain.on_start`` registers ``fn(job)``, run
before the handler; ``@pgdrain.on_finish`` registers ``fn(job, result, error)``, run after the
handler returned (``error`` None) or raised (``result`` None). They run in the order they were
registered, the first outermost.

They run inside the attempt, as if they were part of the handler, so they cannot break what
the drain guarantees: a middleware or start hook that raises fails that attempt as the handler
would (``pgdrain.Snooze`` or ``Discard`` raised there mean what they mean from a handler); the
time limit covers them, and one that swallows ``HandlerTimeout`` still ends the attempt as
timed out (the drain checks the limit itself, and abandons a worker that will not stop). A
finish hook only observes: what it raises is logged, and the job's outcome stands.

A plain ``def`` middleware wraps plain and transactional handlers; an ``async def`` one wraps
``async def`` handlers (``await call_next()``). The hooks are plain functions and run for
every handler. Nothing is paid when nothing is registered: the drain calls the handler as is.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from typing import Any

from .errors import ConfigError
from .registry import REGISTRY, Handler, Kind, Layer, Registry

log = logging.getLogger(__name__)

def middleware(func: Callable[..., Any] | None = None, *, registry: Registry | None = None
               ) -> Any:
    """Register ``func(job, call_next)`` around every handler call (see the module)."""
    return _registrar("middleware", 2, registry)(func) if func is not None else \
        _registrar("middleware", 2, registry)


def on_start(func: Callable[..., Any] | None = None, *, registry: Registry | None = None
             ) -> Any:
    """Register ``func(job)``, called before every handler call (see the module)."""
    return _registrar("start", 1, registry)(func) if func is not None else \
        _registrar("start", 1, registry)


def on_finish(func: Callable[..., Any] | None = None, *, registry: Registry | None = None
              ) -> Any:
    """Register ``func(job, result, error)``, called after every handler call (see the
    module)."""
    return _registrar("finish", 3, registry)(func) if func is not None else \
        _registrar("finish", 3, registry)


def _registrar(kind: Kind, arity: int, registry: Registry | None
               ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        what = {"middleware": "a middleware", "start": "an on_start hook",
                "finish": "an on_finish hook"}[kind]
        expected = {"middleware": "(job, call_next)", "start": "(job)",
                    "finish": "(job, result, error)"}[kind]
        if not callable(func):
            raise ConfigError(f"{what} must be a function {expected}, not {func!r}")
        is_async = inspect.iscoroutinefunction(func)
        if is_async and kind != "middleware":
            raise ConfigError(f"{what} is a plain function {expected}: it runs for every "
                              f"handler, async ones included ({_name(func)} is async def)")
        try:
            inspect.signature(func).bind(*range(arity))
        except TypeError:
            raise ConfigError(f"{what} takes {expected}: {_name(func)} does not") from None
        except ValueError:  # a builtin without a signature: trust it
            pass
        (REGISTRY if registry is None else registry).add_layer(Layer(kind, func, is_async))
        return func

    return register


def applied(registry: Registry, handler: Handler) -> Handler:
    """``handler`` with ``registry``'s middleware and hooks around its function; ``handler``
    itself when none applies. Built once per handler and set of layers."""
    layers = registry.layers()
    if not layers:
        return handler
    cached = registry.wrapped_cache.get(handler.job_type)
    if cached is not None and cached[0] is handler and cached[1] == layers:
        return cached[2]
    mine = tuple(layer for layer in layers if layer.applies_to(handler))
    wrapped = handler if not mine else dataclasses.replace(
        handler, func=(_async_chain if handler.is_async else _chain)(handler.func, mine))
    registry.wrapped_cache[handler.job_type] = (handler, layers, wrapped)
    return wrapped


def _chain(func: Callable[..., Any], layers: tuple[Layer, ...]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        job = args[0]

        def step(index: int) -> Any:
            if index == len(layers):
                return func(*args)
            layer = layers[index]
            if layer.kind == "middleware":
                return layer.func(job, lambda: step(index + 1))
            if layer.kind == "start":
                layer.func(job)
                return step(index + 1)
            return _finishing(layer, job, lambda: step(index + 1))

        return step(0)

    return call


def _async_chain(func: Callable[..., Any], layers: tuple[Layer, ...]) -> Callable[..., Any]:
    async def call(*args: Any) -> Any:
        job = args[0]

        async def step(index: int) -> Any:
            if index == len(layers):
                return await func(*args)
            layer = layers[index]
            if layer.kind == "middleware":
                return await layer.func(job, lambda: step(index + 1))
            if layer.kind == "start":
                layer.func(job)
                return await step(index + 1)
            try:
                value = await step(index + 1)
            except BaseException as exc:
                _finished(layer, job, None, exc)
                raise
            _finished(layer, job, value, None)
            return value

        return await step(0)

    return call


def _finishing(layer: Layer, job: Any, call_next: Callable[[], Any]) -> Any:
    # BaseException: a timeout (HandlerTimeout) is an end the hook should see too.
    try:
        value = call_next()
    except BaseException as exc:
        _finished(layer, job, None, exc)
        raise
    _finished(layer, job, value, None)
    return value


def _finished(layer: Layer, job: Any, value: Any, error: BaseException | None) -> None:
    try:
        layer.func(job, value, error)
    except Exception:
        log.exception("on_finish hook %s raised for job %s; the job's outcome stands",
                      _name(layer.func), getattr(job, "id", "?"))


def _name(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"
