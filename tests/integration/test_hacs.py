"""Offline re-checks of what hassfest and the HACS action validate (neither runs offline), plus
translations, icons, brand images and the quality scale file."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from pathlib import Path
from typing import Any

import homeassistant
import pytest
import yaml  # type: ignore[import-untyped]
from awesomeversion import AwesomeVersion
from homeassistant.const import __version__ as HA_VERSION
from PIL import Image

from custom_components.voice_stack import binary_sensor, const, errors, sensor
from custom_components.voice_stack.config_flow import STEP_REAUTH_SCHEMA, STEP_USER_SCHEMA
from custom_components.voice_stack.devices import _MODEL as DEVICE_KINDS
from custom_components.voice_stack.options_flow import GATEWAY_FIELD, STEP_OPTIONS_SCHEMA

REPO = Path(__file__).resolve().parents[2]
INTEGRATION = REPO / "custom_components" / "voice_stack"
HACS_KEYS = {
    "content_in_root",
    "country",
    "filename",
    "hacs",
    "hide_default_branch",
    "homeassistant",
    "persistent_directory",
    "render_readme",
    "zip_release",
    "name",
}
IOT_CLASSES = {
    "assumed_state",
    "cloud_polling",
    "cloud_push",
    "local_polling",
    "local_push",
    "calculated",
}
INTEGRATION_TYPES = {
    "device",
    "entity",
    "hardware",
    "helper",
    "hub",
    "service",
    "system",
    "virtual",
}
BRAND_FILES = {
    "icon.png",
    "icon@2x.png",
    "logo.png",
    "logo@2x.png",
    "dark_icon.png",
    "dark_icon@2x.png",
    "dark_logo.png",
    "dark_logo@2x.png",
}
QUALITY_RULES = {
    # Bronze
    "action-setup", "appropriate-polling", "brands", "common-modules",
    "config-flow-test-coverage", "config-flow", "dependency-transparency", "docs-actions",
    "docs-triggers", "docs-conditions", "docs-high-level-description",
    "docs-installation-instructions", "docs-removal-instructions", "entity-event-setup",
    "entity-unique-id", "has-entity-name", "runtime-data", "test-before-configure",
    "test-before-setup", "unique-config-entry",
    # Silver
    "action-exceptions", "config-entry-unloading", "docs-configuration-parameters",
    "docs-installation-parameters", "entity-unavailable", "integration-owner",
    "log-when-unavailable", "parallel-updates", "reauthentication-flow", "test-coverage",
    # Gold
    "devices", "diagnostics", "discovery-update-info", "discovery", "docs-data-update",
    "docs-examples", "docs-known-limitations", "docs-supported-devices",
    "docs-supported-functions", "docs-troubleshooting", "docs-use-cases", "dynamic-devices",
    "entity-category", "entity-device-class", "entity-disabled-by-default", "entity-translations",
    "exception-translations", "icon-translations", "reconfiguration-flow", "repair-issues",
    "stale-devices",
    # Platinum
    "async-dependency", "inject-websession", "strict-typing",
}  # fmt: skip
SKIP_DIRS = {".git", ".cache", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return dict(_json(INTEGRATION / "manifest.json"))


@pytest.fixture(scope="module")
def strings() -> dict[str, Any]:
    return dict(_json(INTEGRATION / "translations" / "en.json"))


def _sources() -> str:
    return "\n".join(p.read_text() for p in sorted(INTEGRATION.glob("*.py")))


def test_hacs_json_uses_only_accepted_keys() -> None:
    hacs = _json(REPO / "hacs.json")
    assert set(hacs) <= HACS_KEYS
    assert hacs == {"name": "Voice Stack", "homeassistant": "2026.10.4"}
    minimum = AwesomeVersion(hacs["homeassistant"])
    assert minimum.valid
    assert minimum <= AwesomeVersion(HA_VERSION), "hacs.json asks for a newer HA than we test"


def test_manifest_keys_order_and_values(manifest: dict[str, Any]) -> None:
    keys = list(manifest)
    assert keys[:2] == ["domain", "name"]
    assert keys[2:] == sorted(keys[2:]), "hassfest: domain, name, then alphabetical order"
    assert manifest["domain"] == INTEGRATION.name == const.DOMAIN
    for key in ("codeowners", "documentation", "issue_tracker", "version"):  # HACS schema
        assert key in manifest
    assert AwesomeVersion(manifest["version"]).valid
    assert manifest["iot_class"] in IOT_CLASSES
    assert manifest["integration_type"] in INTEGRATION_TYPES
    assert manifest["config_flow"] is True
    assert (INTEGRATION / "config_flow.py").is_file()
    # A floor, not a pin: HA 2026.10.4 constrains openai==3.10.0 and 2026.11.0 openai==3.26.0,
    # and HA installs an integration's requirements under its own constraints, so a single
    # `==` would fail on one of the two supported versions. Whatever HA ships is what runs.
    assert manifest["requirements"] == ["openai>=3.10.0"]
    constraints = (Path(homeassistant.__file__).parent / "package_constraints.txt").read_text()
    pinned = re.search(r"^openai==(\S+)$", constraints, re.MULTILINE)
    assert pinned, "HA no longer constrains openai: pin it in the manifest"
    assert importlib.metadata.version("openai") == pinned.group(1)  # the test venv matches HA
    assert manifest["documentation"].startswith("https://")


def test_exactly_one_manifest_and_one_integration() -> None:
    found = []
    for root, dirs, files in os.walk(REPO):
        # dev/ is the harness (a probe component linked into the soak's HA), never shipped
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and Path(root, d) != REPO / "dev"]
        found += [Path(root) / f for f in files if f.endswith("manifest.json")]
    assert found == [INTEGRATION / "manifest.json"]
    assert [p.name for p in (REPO / "custom_components").iterdir() if p.is_dir()] == ["voice_stack"]


def test_brand_images() -> None:
    brand = INTEGRATION / "brand"
    assert {p.name for p in brand.iterdir()} <= BRAND_FILES
    sizes = {}
    for path in brand.iterdir():
        with Image.open(path) as image:
            assert image.format == "PNG"
            sizes[path.name] = image.size
    assert sizes["icon.png"] == (256, 256)
    assert sizes["icon@2x.png"] == (512, 512)
    for name, (low, high) in {"logo.png": (128, 256), "logo@2x.png": (256, 512)}.items():
        width, height = sizes[name]
        assert low <= min(width, height) <= high, name
        assert width >= height, f"{name}: landscape preferred"


def test_translations_have_no_core_only_references() -> None:
    """[%key:...%] is resolved only when HA core builds its strings; custom ones show it raw."""
    assert "[%key:" not in (INTEGRATION / "translations" / "en.json").read_text()


def _field_names(schema: Any) -> set[str]:
    return {str(key) for key in schema.schema}


def test_config_and_options_flow_strings(strings: dict[str, Any]) -> None:
    config, options = strings["config"], strings["options"]
    user_fields = _field_names(STEP_USER_SCHEMA) | {str(k) for k in GATEWAY_FIELD}
    assert user_fields <= set(config["step"]["user"]["data"])
    assert user_fields <= set(config["step"]["user"]["data_description"])
    assert _field_names(STEP_REAUTH_SCHEMA) <= set(config["step"]["reauth_confirm"]["data"])
    assert _field_names(STEP_OPTIONS_SCHEMA) <= set(options["step"]["init"]["data"])
    assert _field_names(STEP_OPTIONS_SCHEMA) <= set(options["step"]["init"]["data_description"])

    flow = (INTEGRATION / "config_flow.py").read_text() + (
        INTEGRATION / "agent_flow.py"
    ).read_text()
    for step in re.findall(r'step_id="(\w+)"', flow):
        assert step in config["step"] or any(
            step in sub["step"] for sub in strings["config_subentries"].values()
        ), step
    errors = {
        "".join(found)
        for found in re.findall(
            r'(?:"base"|CONF_\w+): "(\w+)"|error = "(\w+)"|return "(\w+)"',
            (INTEGRATION / "validation.py").read_text(),
        )
    }
    assert {"invalid_auth", "cannot_connect", "url_has_credentials", "model_loading"} <= errors
    assert errors <= set(config["error"]), errors - set(config["error"])
    agent_side = (INTEGRATION / "agent_flow.py").read_text() + (
        INTEGRATION / "slot_offer.py"
    ).read_text()
    agent_errors = {
        "".join(found)
        for found in re.findall(r'errors\[\w+\] = "(\w+)"|error = "(\w+)"', agent_side)
    }
    assert {
        "slot_taken",
        "no_slot_picked",
        "no_reserved_slot_free",
        "no_slot_reserved",
        "no_free_slot",
    } <= agent_errors
    for kind, sub in strings["config_subentries"].items():
        assert agent_errors <= set(sub["error"]), (kind, agent_errors - set(sub["error"]))
    gateway_errors = set(
        re.findall(r'CONF_GATEWAY_URL: "(\w+)"', (INTEGRATION / "validation.py").read_text())
    )
    assert gateway_errors <= set(config["error"]) & set(options["error"])
    for reason in re.findall(r'reason="(\w+)"', flow):
        assert reason in config["abort"] or all(
            reason in sub["abort"] for sub in strings["config_subentries"].values()
        ), reason


def test_every_subentry_field_is_described(strings: dict[str, Any]) -> None:
    """quality_scale config-flow: every field, the agent's name included, has a description."""
    for kind, sub in strings["config_subentries"].items():
        step = sub["step"]["set_options"]
        assert "name" in step["data"], kind
        assert set(step["data"]) == set(step["data_description"]), kind


def test_entity_device_issue_and_exception_strings(strings: dict[str, Any]) -> None:
    sensor_keys = {
        d.translation_key
        for group in (
            sensor.AGENT_SENSORS,
            sensor.LLAMA_SENSORS,
            sensor.PROXY_SENSORS,
            sensor.GATEWAY_SENSORS,
        )
        for d in group
    } | {sensor.SERVER_STATE.translation_key}
    sensor_strings = strings["entity"]["sensor"]
    assert sensor_keys == set(sensor_strings)
    assert set(sensor.SERVER_STATES) == set(sensor_strings["server_state"]["state"])
    binary_keys = {binary_sensor.OPEN_ACCESS.translation_key}
    assert binary_keys == set(strings["entity"]["binary_sensor"])
    assert binary_sensor.CONNECTIVITY.translation_key is None  # named by its device class
    assert set(DEVICE_KINDS) == set(strings["device"])

    issue_keys = {value for name, value in vars(const).items() if name.startswith("ISSUE_")}
    assert issue_keys == set(strings["issues"]), issue_keys ^ set(strings["issues"])
    for key in issue_keys:
        assert {"title", "description"} <= set(strings["issues"][key])

    raised = set(re.findall(r'translation_domain=DOMAIN,\s*translation_key="(\w+)"', _sources()))
    assert raised, "no translated exceptions found"
    # The client errors' messages (errors.translate_errors picks the key).
    raised |= {key for _, key in errors._PLAIN} | {"timeout", "context_full", "server_error"}
    assert raised <= set(strings["exceptions"]), raised - set(strings["exceptions"])


def _table_column(section: str, column: int) -> str:
    """One column of the tables of a markdown section, its cells joined."""
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("|")]
    return "\n".join(row[column].strip() for row in rows if not row[0].startswith("---"))


def test_sensors_doc_names_every_entity_and_device(strings: dict[str, Any]) -> None:
    """docs/sensors.md names each entity and each device as Home Assistant shows them."""
    intro, rest = (REPO / "docs" / "sensors.md").read_text().split("\n## What each number means")
    entities = _table_column(rest.split("\n## ", 1)[0], 1)
    named = [
        entity["name"]
        for platform in ("sensor", "binary_sensor")
        for entity in strings["entity"][platform].values()
    ]
    assert [name for name in named if name not in entities] == []
    assert "Connectivity" in entities  # named by its device class
    devices = _table_column(intro, 0)
    assert [d["name"] for d in strings["device"].values() if d["name"] not in devices] == []


def test_icons_match_entity_translations(strings: dict[str, Any]) -> None:
    icons = _json(INTEGRATION / "icons.json")["entity"]
    for platform, entries in icons.items():
        assert set(entries) <= set(strings["entity"][platform]), platform
        for entry in entries.values():
            assert entry["default"].startswith("mdi:")
    assert set(icons["sensor"]) == set(strings["entity"]["sensor"])


def test_quality_scale_lists_every_rule() -> None:
    rules = yaml.safe_load((INTEGRATION / "quality_scale.yaml").read_text())["rules"]
    assert set(rules) == QUALITY_RULES
    for rule, value in rules.items():
        status = value if isinstance(value, str) else value["status"]
        assert status in ("done", "todo", "exempt"), rule
        if status == "exempt":
            assert value.get("comment"), f"{rule}: exempt needs a reason"


def test_workflows_run_the_official_validators_and_the_tests() -> None:
    validate = yaml.safe_load((REPO / ".github" / "workflows" / "validate.yml").read_text())
    steps = [s for job in validate["jobs"].values() for s in job["steps"]]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("home-assistant/actions/hassfest@") for u in uses)
    hacs = next(s for s in steps if s.get("uses", "").startswith("hacs/action@"))
    assert hacs["with"] == {"category": "integration"}, "no ignores once brand/ exists"
    tests = (REPO / ".github" / "workflows" / "tests.yml").read_text()
    assert "./scripts/test" in tests
