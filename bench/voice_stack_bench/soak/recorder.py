"""What HA's recorder wrote for our entities during the run, each row by what it changed: a
soak runs long enough to show rows written for a time stamp alone, which fill the database."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from voice_stack_dev.demo.provision import registry
from voice_stack_dev.ha_client import HomeAssistantClient

ROW_KINDS = ("first", "state", "attributes", "timestamps_only", "unchanged")


async def our_entities(ha: HomeAssistantClient) -> set[str]:
    """The sensors of our integration and HA's wyoming integration: whose rows are counted."""
    return {e["entity_id"] for e in await registry(ha)
            if e["platform"] in ("voice_stack", "wyoming")
            and e["entity_id"].split(".")[0] in ("sensor", "binary_sensor")}  # fmt: skip


def recorder_rows(
    config_dir: Path, entity_ids: set[str], since_ts: float
) -> dict[str, Counter[str]]:
    """State rows HA's recorder wrote for these entities since `since_ts` (Unix time), each by
    what it changed against the entity's row before: its state, an attribute, only attributes
    that hold a time (the churn of a "last success" stamp), or nothing (HA writes every entity
    anew when it starts)."""
    db = config_dir / "home-assistant_v2.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        rows = conn.execute(
            "SELECT m.entity_id, s.state, a.shared_attrs FROM states s JOIN states_meta m"
            " ON s.metadata_id = m.metadata_id LEFT JOIN state_attributes a"
            " ON s.attributes_id = a.attributes_id WHERE s.last_updated_ts >= ?"
            " ORDER BY m.entity_id, s.last_updated_ts",
            (since_ts,),
        ).fetchall()
    kinds: dict[str, Counter[str]] = {}
    before: dict[str, tuple[str, dict[str, Any]]] = {}
    for entity_id, state, shared in rows:
        if entity_id not in entity_ids:
            continue
        now = (state, json.loads(shared) if shared else {})
        kinds.setdefault(entity_id, Counter())[_row_kind(before.get(entity_id), now)] += 1
        before[entity_id] = now
    return kinds


def _row_kind(before: tuple[str, dict[str, Any]] | None, now: tuple[str, dict[str, Any]]) -> str:
    if before is None:
        return "first"
    if before[0] != now[0]:
        return "state"
    changed = {k for k in before[1].keys() | now[1].keys() if before[1].get(k) != now[1].get(k)}
    if not changed:
        return "unchanged"
    return "timestamps_only" if all(_is_time(now[1].get(k)) for k in changed) else "attributes"


def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def rows_are_value_changes(kinds: dict[str, Counter[str]], ha_starts: int) -> bool:
    """No row for a time stamp alone, and no unchanged row beyond one per HA start."""
    return all(c["timestamps_only"] == 0 and c["unchanged"] <= ha_starts for c in kinds.values())


def rows_report(kinds: dict[str, Counter[str]], span: float) -> dict[str, Any]:
    """The rows by entity, per hour of the run (`span` s), and by what each changed."""
    rows = {entity_id: sum(c.values()) for entity_id, c in kinds.items()}
    return {
        "by_entity": rows,
        "per_hour": round(sum(rows.values()) / (span / 3600), 1) if span else None,
        "what_changed": {k: {kind: c[kind] for kind in ROW_KINDS} for k, c in kinds.items()},
    }
