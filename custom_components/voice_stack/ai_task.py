"""AI Task entity: generate data (optionally JSON with a schema)."""

from __future__ import annotations

from json import JSONDecodeError
from typing import override

from homeassistant.components import ai_task, conversation
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.util.json import json_loads

from .const import DOMAIN, SUBENTRY_AI_TASK
from .devices import add_agent_entities
from .entity import VoiceStackLLMEntity
from .runtime import VoiceStackConfigEntry

PARALLEL_UPDATES = 0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: VoiceStackConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add one AI Task entity per ai_task_data subentry."""
    add_agent_entities(
        entry,
        async_add_entities,
        (SUBENTRY_AI_TASK,),
        lambda subentry: [
            VoiceStackTaskEntity(entry, entry.runtime_data.agents[subentry.subentry_id])
        ],
    )


class VoiceStackTaskEntity(ai_task.AITaskEntity, VoiceStackLLMEntity):
    """AI Task entity on its own slots (it renders HA's own task prompt: see Agent)."""

    _attr_supported_features = ai_task.AITaskEntityFeature.GENERATE_DATA

    @override
    async def _async_generate_data(
        self, task: ai_task.GenDataTask, chat_log: conversation.ChatLog
    ) -> ai_task.GenDataTaskResult:
        """Run the task; parse JSON when a structure was asked for."""
        await self._async_handle_chat_log(chat_log, task.name, task.structure)
        last = chat_log.content[-1]
        if not isinstance(last, conversation.AssistantContent):
            raise HomeAssistantError(translation_domain=DOMAIN, translation_key="no_reply")
        text = last.content or ""
        if not task.structure:
            return ai_task.GenDataTaskResult(conversation_id=chat_log.conversation_id, data=text)
        try:
            data = json_loads(text)
        except JSONDecodeError as err:
            raise HomeAssistantError(
                translation_domain=DOMAIN, translation_key="invalid_json"
            ) from err
        return ai_task.GenDataTaskResult(conversation_id=chat_log.conversation_id, data=data)
