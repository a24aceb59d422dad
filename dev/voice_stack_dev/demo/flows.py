"""Drive HA data-entry flows over REST the way the frontend's dialogs do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ha_client import HomeAssistantClient, Json
from .errors import DemoError

MAX_STEPS = 8


async def run_flow(
    ha: HomeAssistantClient,
    base: str,
    start: Json,
    answers: Mapping[str, Any],
    *,
    what: str,
    done_reasons: tuple[str, ...] = (),
) -> Json:
    """Start a flow at `base` and answer each form from `answers` until it finishes.

    Fields the answers do not name keep the form's defaults (as a user who only fills
    the required fields). Menus pick the option named in answers["next_step_id"], else the first.
    """
    result: Json = await ha.request("POST", base, json=start)
    for _ in range(MAX_STEPS):
        kind = result.get("type")
        if kind == "create_entry" or (kind == "abort" and result.get("reason") in done_reasons):
            return result
        if kind == "abort":
            raise DemoError("Home Assistant", f"{what}: aborted ({result.get('reason')})")
        if result.get("errors"):
            raise DemoError("Home Assistant", f"{what}: {result['errors']}")
        if kind == "menu":
            options = result.get("menu_options") or []
            choice = answers.get("next_step_id") or (options[0] if options else None)
            payload: Json = {"next_step_id": choice}
        elif kind == "form":
            payload = fill_form(result.get("data_schema") or [], answers)
        else:
            raise DemoError("Home Assistant", f"{what}: unexpected flow step {kind}")
        result = await ha.request("POST", f"{base}/{result['flow_id']}", json=payload)
    raise DemoError("Home Assistant", f"{what}: flow did not finish in {MAX_STEPS} steps")


async def edit_dialog(
    ha: HomeAssistantClient, base: str, start: Json, wanted: Mapping[str, Any], *, what: str
) -> dict[str, Any]:
    """Open an edit dialog (options, reconfigure); save only if a value differs from `wanted`.

    Returns the values the dialog showed (HA's API never returns entry data otherwise).
    Saving reloads the entry, so an unchanged dialog is closed without saving.
    """
    form: Json = await ha.request("POST", base, json=start)
    if form.get("type") != "form":
        raise DemoError("Home Assistant", f"{what}: {form.get('reason', form)}")
    schema: list[Json] = form.get("data_schema") or []
    shown = {
        str(f.get("name")): (f.get("description") or {}).get("suggested_value", f.get("default"))
        for f in schema
    }
    if all(shown.get(key) == value for key, value in wanted.items()):
        await ha.request("DELETE", f"{base}/{form['flow_id']}")
        return shown
    result = await ha.request("POST", f"{base}/{form['flow_id']}", json=fill_form(schema, wanted))
    if result.get("errors") or result.get("type") not in ("create_entry", "abort"):
        raise DemoError("Home Assistant", f"{what}: {result.get('errors') or result}")
    if result["type"] == "abort" and result.get("reason") != "reconfigure_successful":
        raise DemoError("Home Assistant", f"{what}: aborted ({result.get('reason')})")
    return shown


def fill_form(schema: list[Json], answers: Mapping[str, Any]) -> Json:
    """The form payload as the dialog submits it: our answers, else what it pre-fills."""
    payload: Json = {}
    for field in schema:
        name = str(field.get("name"))
        suggested = (field.get("description") or {}).get("suggested_value")
        if name in answers:
            payload[name] = answers[name]
        elif suggested is not None:
            payload[name] = suggested
        elif field.get("required") and "default" in field:
            payload[name] = field["default"]
        elif field.get("type") == "expandable":  # a section: fill its own fields
            payload[name] = fill_form(field.get("schema") or [], answers)
    return payload
