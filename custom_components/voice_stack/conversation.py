"""Conversation agent on its own llama-server slots."""

from __future__ import annotations

from typing import Literal, override

from homeassistant.components import conversation
from homeassistant.const import MATCH_ALL
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .agent import Agent
from .const import SUBENTRY_CONVERSATION
from .devices import add_agent_entities
from .entity import VoiceStackLLMEntity
from .runtime import VoiceStackConfigEntry

PARALLEL_UPDATES = 0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: VoiceStackConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add one conversation entity per conversation subentry."""
    add_agent_entities(
        entry,
        async_add_entities,
        (SUBENTRY_CONVERSATION,),
        lambda subentry: [
            VoiceStackConversationEntity(entry, entry.runtime_data.agents[subentry.subentry_id])
        ],
    )


class VoiceStackConversationEntity(conversation.ConversationEntity, VoiceStackLLMEntity):
    """Streaming, tool-calling conversation agent."""

    _attr_supports_streaming = True

    def __init__(self, entry: VoiceStackConfigEntry, agent: Agent) -> None:
        """Set up the agent; device control only when it may control Home Assistant."""
        super().__init__(entry, agent)
        if agent.llm_apis:
            self._attr_supported_features = conversation.ConversationEntityFeature.CONTROL

    @property
    @override
    def supported_languages(self) -> list[str] | Literal["*"]:
        """Any language the model speaks."""
        return MATCH_ALL

    @override
    async def _async_handle_message(
        self,
        user_input: conversation.ConversationInput,
        chat_log: conversation.ChatLog,
    ) -> conversation.ConversationResult:
        """Answer one user turn, streaming, with tools."""
        try:
            await chat_log.async_provide_llm_data(
                user_input.as_llm_context(self.platform.domain),
                self.agent.llm_apis or None,
                self.agent.prompt_template(),
                user_input.extra_system_prompt,
            )
        except conversation.ConverseError as err:
            return err.as_conversation_result()
        await self._async_handle_chat_log(chat_log)
        return conversation.async_get_result_from_chat_log(user_input, chat_log)
