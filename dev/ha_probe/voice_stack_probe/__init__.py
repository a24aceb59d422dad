"""The soak's probe inside Home Assistant (bench/soak.py links it into its own HA config only;
it is never part of the integration): the event loop's live tasks, and those running the Voice
Stack integration's code, which no HA API reports."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import CodeType
from typing import Any

from aiohttp import web
from homeassistant.core import HomeAssistant
from homeassistant.helpers.http import HomeAssistantView
from homeassistant.helpers.typing import ConfigType

DOMAIN = "voice_stack_probe"
OURS = "/custom_components/voice_stack/"


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    hass.http.register_view(TasksView())
    return True


def _our_code(task: asyncio.Task[Any]) -> str | None:
    """The first coroutine of ours in the task's await chain (a coordinator's refresh runs our
    update inside HA's own coroutine), as 'module.qualname'; None if it runs none of ours."""
    coro: Any = task.get_coro()
    while coro is not None:
        code: CodeType | None = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        if code is not None and OURS in code.co_filename:
            module = code.co_filename.rsplit(OURS, 1)[1].removesuffix(".py")
            return f"{module}.{code.co_qualname}"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return None


class TasksView(HomeAssistantView):
    """GET /api/voice_stack_probe/tasks (an admin's token, like every HA API)."""

    url = "/api/voice_stack_probe/tasks"
    name = "api:voice_stack_probe:tasks"

    async def get(self, request: web.Request) -> web.Response:
        tasks = asyncio.all_tasks()
        ours = Counter(name for task in tasks if (name := _our_code(task)) is not None)
        return self.json({"tasks": len(tasks), "ours": sum(ours.values()), "ours_by_code": ours})
