"""Runs `async def` tests of this directory with asyncio.run (the venv has no pytest-asyncio)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

TEST_TIMEOUT_S = 10  # every test here takes well under a second; a hang fails fast


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    params = inspect.signature(pyfuncitem.obj).parameters
    kwargs = {name: pyfuncitem.funcargs[name] for name in params}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), TEST_TIMEOUT_S))
    return True
